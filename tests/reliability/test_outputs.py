"""Outputs: checked before any work, written atomically, nothing left by a failed run."""

import os

import pytest

from kvforensics.errors import InputError
from kvforensics.outputs import atomic_write, check_output
from tests.conftest import FIXTURES
from tests.reliability._logs import write_log
from tests.reliability._run import run_cli

INCIDENT = FIXTURES / "scenarios" / "incident-2026-11-02.toml"


def _tree(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("adir.csv", "is a directory"),
        ("afile/x.csv", "is not a directory"),
        ("a" * 300 + ".csv", "file name longer than"),
        ("/proc/x.csv", "cannot create files in /proc"),
    ],
)
def test_bad_output_refused_before_work(tmp_path, name, says):
    (tmp_path / "adir.csv").mkdir()
    (tmp_path / "afile").write_text("keep")
    log = write_log(tmp_path)
    before = _tree(tmp_path)
    out_path = name if name.startswith("/") else tmp_path / name
    for args in (
        ("parse", log, "-o", out_path),
        ("simulate", INCIDENT, "--ledger", out_path),
    ):
        out = run_cli(*args)
        assert out.code == 2 and says in out.stderr, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1
        assert _tree(tmp_path) == before
    assert (tmp_path / "afile").read_text() == "keep"


def test_failed_parse_creates_nothing(tmp_path):
    out = run_cli("parse", tmp_path / "missing.log", "-o", tmp_path / "new" / "sub" / "x.csv")
    assert out.code == 2 and "no such file" in out.stderr
    assert _tree(tmp_path) == []


def test_failed_write_leaves_no_file_and_no_new_directory(tmp_path):
    target = tmp_path / "new" / "deeper" / "out.csv"

    def write(tmp):
        tmp.write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(InputError, match="No space left on device"):
        atomic_write(target, write)
    assert _tree(tmp_path) == []


def test_write_replaces_atomically_and_is_an_ordinary_file(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    atomic_write(target, lambda p: p.write_text("new"))
    assert target.read_text() == "new" and _tree(tmp_path) == ["out.txt"]
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


def test_check_output_creates_nothing(tmp_path):
    check_output(tmp_path / "a" / "b" / "c.csv")
    check_output(tmp_path / "report", directory=True)
    assert _tree(tmp_path) == []
