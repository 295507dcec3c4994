"""The Triton kernel under its interpreter is the oracle for the store: it must write the
same bits as torch's index_copy_. The interpreter is chosen when triton is first imported,
so it runs in a fresh process here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import triton  # noqa: F401  (CI installs the gpu extra: a missing triton must fail loudly)

from kvforensics.exec import execute, plan_from_scenario
from tests.exec.conftest import INCIDENT, POSTMORTEM, ROOT


def _run(code: str, interpret: bool = True) -> str:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


KERNEL_CHECK = """
import torch
from kvforensics.exec.store import get_store
interp, ref = get_store("interpret"), get_store("torch")
g = torch.Generator().manual_seed(1)
cases = 0
for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn):
    for layers, width in ((1, 8), (2, 12), (3, 576), (2, 7)):
        for n in (1, 63, 200):
            kv0 = torch.randn(layers, 512, width, generator=g).to(dtype)
            src = torch.randn(layers, n, width, generator=g).to(dtype)
            idx = torch.randperm(512, generator=g)[:n]
            a, b = kv0.clone(), kv0.clone()
            interp(a, idx, src)
            ref(b, idx, src)
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), (dtype, layers, width, n)
            cases += 1
# strided source (a host copy staged token-major and permuted)
kv0 = torch.zeros(2, 256, 12, dtype=torch.bfloat16)
src = torch.randn(40, 2, 12, generator=g).to(torch.bfloat16).permute(1, 0, 2)
idx = torch.randperm(256, generator=g)[:40]
a, b = kv0.clone(), kv0.clone()
interp(a, idx, src)
ref(b, idx, src)
assert torch.equal(a.view(torch.int16), b.view(torch.int16))
print(cases + 1)
"""


def test_interpreted_kernel_matches_index_copy():
    assert int(_run(KERNEL_CHECK)) == 49


@pytest.mark.parametrize(
    ("scenario", "policy", "layout"),
    [
        (POSTMORTEM, "prefix", (2, 8, 4)),
        # the wide row and the incident's longer run under the fix: long runs of the
        # interpreted kernel, in the slow step
        pytest.param(POSTMORTEM, "fixed", (1, 576, 0), marks=pytest.mark.slow),
        (INCIDENT, "prefix", (1, 8, 0)),
        pytest.param(INCIDENT, "fixed", (1, 4, 4), marks=pytest.mark.slow),
    ],
)
def test_interpreter_and_torch_backends_are_bit_identical(scenario, policy, layout):
    layers, kv_dim, rope_dim = layout
    code = f"""
    import json
    from kvforensics.exec import execute, plan_from_scenario
    r = execute(plan_from_scenario({str(scenario)!r}, {policy!r}), device="cpu",
                backend="interpret", layers={layers}, kv_dim={kv_dim}, rope_dim={rope_dim})
    print(json.dumps(r.as_dict()))
    """
    interp = json.loads(_run(code))
    ref = execute(
        plan_from_scenario(str(scenario), policy),
        device="cpu",
        backend="torch",
        layers=layers,
        kv_dim=kv_dim,
        rope_dim=rope_dim,
    )
    assert interp["backend"] == "interpret" and interp["integrity"] == "ok"
    assert interp["oom"] == (ref.oom.as_dict() if ref.oom else None) and interp["agrees_with_model"]
    assert interp["kv_digest"] == ref.kv_digest is not None


def test_switching_interpreter_mode_in_process_is_refused():
    out = _run(
        """
        import triton  # loaded compiled
        from kvforensics.errors import KvfError
        from kvforensics.exec.store import get_store
        try:
            get_store("interpret")
        except KvfError as exc:
            print("refused:", exc)
        """,
        interpret=False,
    )
    assert out.startswith("refused:") and "TRITON_INTERPRET=1" in out


def test_compiled_triton_needs_cuda():
    from kvforensics.errors import KvfError
    from kvforensics.exec.store import resolve

    with pytest.raises(KvfError, match="needs CUDA"):
        resolve("cpu", "triton")
    assert resolve("cpu", "auto") == ("cpu", "torch")
