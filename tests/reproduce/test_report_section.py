"""`report --reproduce`: the reproducer beside report.md and its section; none without."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import FIXTURES

ABC = FIXTURES / "scenarios" / "postmortem-abc.toml"


def report(out, *extra):
    return subprocess.run([sys.executable, "-m", "kvforensics", "report", ABC, "-o", out,
                           "--no-progress", *extra], capture_output=True, text=True, timeout=600)  # fmt: skip


def test_section_and_files_only_when_asked(tmp_path):
    got = report(tmp_path / "with", "--reproduce")
    assert got.returncode == 0, got.stderr
    md = (tmp_path / "with" / "report.md").read_text()
    section = md.split("## Reproducer", 1)[1].split("## Files", 1)[0]
    assert "reproducer.toml" in section and "1/61 of 12000" in section
    assert "python -m pytest " in section and "KVF_ADDER_FIX=tail" in section
    assert "Drops the traffic" in section
    test = tmp_path / "with" / "test_prefill_adder_postmortem_abc_repro.py"
    assert test.is_file() and (tmp_path / "with" / "reproducer.toml").is_file()
    assert f"- `{test.name}`" in md  # listed with the report's files

    got = report(tmp_path / "without")
    assert got.returncode == 0, got.stderr
    assert "## Reproducer" not in (tmp_path / "without" / "report.md").read_text()
    assert not list((tmp_path / "without").glob("test_*.py"))
