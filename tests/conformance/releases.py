"""The SGLang releases the differential harness holds the model to, each with the
reference interpreter that runs its code and the model profile that claims to be it.

0.5.23 runs in ``.venv-sglang``; every other release in ``.venv-sglang-<release>``
(``tests/conformance/sglang-releases.txt``, built by ``scripts/conformance_env.sh``).
``KVF_RELEASES`` (space-separated) narrows the releases a test run covers.
"""

from __future__ import annotations

import os
from pathlib import Path

from kvforensics.model.profiles import profile_for_release

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DEFAULT = "0.5.23"


def listed() -> list[str]:
    """0.5.23 first, then the releases of sglang-releases.txt in their order."""
    out = [DEFAULT]
    for line in (HERE / "sglang-releases.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            out.append(line.split()[0])
    return out


def selected() -> list[str]:
    env = os.environ.get("KVF_RELEASES")
    return env.split() if env else listed()


def venv(release: str) -> Path:
    return ROOT / (".venv-sglang" if release == DEFAULT else f".venv-sglang-{release}")


def profile_name(release: str) -> str:
    p = profile_for_release(release)
    if p is None:
        raise ValueError(f"no model profile covers SGLang {release}")
    return p.name
