from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "logs" / "samples"


@pytest.fixture
def samples() -> Path:
    return SAMPLES


def run_cli(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The real entry point, so exit codes and `error:` lines are what a user sees."""
    return subprocess.run(
        [sys.executable, "-m", "kvforensics", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )
