from __future__ import annotations

import json
import subprocess
import sys

from tests.exec.conftest import ROOT


def test_gpu_exec_check_tiny():
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_exec_check.py"), "--tiny"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    assert summary["mode"] == "tiny"
    assert all(summary["checks"].values())
    assert summary["incident"]["prefix"]["oom"]["tokens"] == 2056
    assert summary["bench"]["copy_gbps"] > 0
