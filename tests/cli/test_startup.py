"""What a command loads before it starts: matplotlib (most of the start-up) only for the
commands that draw, so that `parse`, `rounds` and `replay` start without it."""

from __future__ import annotations

import subprocess
import sys


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"import sys\n{code}\nprint(' '.join(sys.modules))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return set(out.stdout.split())


def test_the_cli_loads_without_matplotlib():
    mods = _modules_after("import kvforensics.cli")
    assert "kvforensics.cli" in mods
    assert "matplotlib" not in mods
    assert "torch" not in mods


def test_the_report_still_draws_with_it():
    mods = _modules_after("from kvforensics.report.figures import plot_pool")
    assert "matplotlib" in mods
