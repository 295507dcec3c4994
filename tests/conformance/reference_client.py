"""Project-side access to the SGLang 0.5.23 reference (tests/conformance/sglang_ref.py).

The reference runs in its own interpreter (``.venv-sglang``, built by
``scripts/conformance_env.sh``); nothing here imports SGLang. ``SglangReference``
keeps one ``--serve`` process warm, so a property-based test can send many round
specs and compare the records field by field with the project's model.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from . import releases

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
REF_SCRIPT = HERE / "sglang_ref.py"
MULTI_SCRIPT = HERE / "sglang_multi.py"  # the multi-round reference (0.5.23 only)
RECORD_FIELDS = (
    "call",
    "rid",
    "result",
    "decision",
    "start",
    "end",
    "rem_total_tokens",
    "cur_rem_tokens",
    "rem_chunk_tokens",
    "rem_total_offset",
    "cur_offset",
    "load_back",
)


def reference_python(release: str = releases.DEFAULT) -> Path:
    """The release's reference interpreter (0.5.23: override with KVF_SGLANG_PYTHON)."""
    env = os.environ.get("KVF_SGLANG_PYTHON")
    if env and release == releases.DEFAULT:
        return Path(env)
    return releases.venv(release) / "bin" / "python"


class ReferenceUnavailable(RuntimeError):
    pass


class SglangReference:
    def __init__(
        self, python: Path | None = None, release: str = releases.DEFAULT, script: Path = REF_SCRIPT
    ):
        #: the reference's own time for the last round (no pipe, no JSON)
        self.last_seconds = 0.0
        self.release = release
        py = python or reference_python(release)
        if not py.exists():
            raise ReferenceUnavailable(
                f"{py} not found: build it with `bash scripts/conformance_env.sh`"
            )
        self._proc = subprocess.Popen(
            [str(py), "-W", "ignore", str(script), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )

    def run(self, round_spec: dict) -> list[dict]:
        """Records for one round; raises ValueError for a spec the reference rejects."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(round_spec) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise ReferenceUnavailable(f"reference exited (rc={self._proc.poll()})")
        reply = json.loads(line)
        if "error" in reply:
            raise ValueError(reply["error"])
        self.last_seconds = reply.get("seconds", 0.0)
        #: what the reference's SGLang code printed during the last call (multi-round)
        self.last_printed = reply.get("printed", [])
        return reply["records"]

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()  # a reference stuck in a round must not hide the cause
                self._proc.wait()

    def __enter__(self) -> SglangReference:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def diff_records(expected: list[dict], actual: list[dict]) -> list[str]:
    """Field-by-field differences between two record lists (empty when equal)."""
    out = []
    if len(expected) != len(actual):
        out.append(f"record count: reference {len(expected)} vs model {len(actual)}")
    for i, (e, a) in enumerate(zip(expected, actual, strict=False)):
        for f in RECORD_FIELDS:
            if e.get(f) != a.get(f):
                out.append(
                    f"record {i} ({e.get('call')} {e.get('rid')}): {f}: "
                    f"reference {e.get(f)!r} vs model {a.get(f)!r}"
                )
    return out
