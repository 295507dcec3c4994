"""The fuzz checker itself: each failure class the reliability bar names is caught, and
a clean run passes (a checker that misses a class would report a clean campaign)."""

import gzip
import json

import pytest

from tests.fuzz._cases import LOGS, Case, problems, snapshot
from tests.fuzz._runner import run_case

TRACEBACK = 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nValueError\n'


@pytest.fixture
def case(tmp_path):
    log = tmp_path / "log0.log"
    log.write_bytes(LOGS[0].read_bytes())
    out = tmp_path / "out.csv"
    return Case(["parse", str(log), "-o", str(out)], [log], [out])


def _check(case, tmp, before, code=0, text="", raw=""):
    return problems(case, code, text, raw, tmp, before)


def test_a_clean_run_passes(case, tmp_path):
    before = snapshot(tmp_path)
    case.outputs[0].write_text("a,b\n1,2\n")
    assert _check(case, tmp_path, before) == []
    assert _check(case, tmp_path, snapshot(tmp_path), code=2, text="error: bad\n") == []
    # a log's own copy of a traceback, quoted after its prefix, is not ours
    assert _check(case, tmp_path, before, text="[PP0] Scheduler: " + TRACEBACK) == []


@pytest.mark.parametrize(
    ("code", "text", "raw", "word"),
    [
        (70, "internal error: TypeError: x\n", "", "exit 70"),
        (1, "", "", None),
        (5, "", "", "exit 5"),
        (2, TRACEBACK, "", "traceback"),
        (2, "", TRACEBACK, "traceback"),
        (2, "", "thread '<unnamed>' panicked at src/lib.rs:1:1:\n", "raw output"),
    ],
)
def test_exit_codes_and_what_was_printed(case, tmp_path, code, text, raw, word):
    found = _check(case, tmp_path, snapshot(tmp_path), code=code, text=text, raw=raw)
    assert (word is None and found == []) or any(word in f for f in found), found


def test_a_changed_or_removed_input(case, tmp_path):
    before = snapshot(tmp_path)
    case.inputs[0].write_bytes(case.inputs[0].read_bytes() + b"x")
    assert any("inputs changed" in f for f in _check(case, tmp_path, before))
    case.inputs[0].unlink()
    assert any("inputs changed" in f for f in _check(case, tmp_path, before))


@pytest.mark.parametrize("name", [".out.csv.ab12.tmp/out.csv", "x.kvforensics-probe.ab12"])
def test_a_temporary_file_left(case, tmp_path, name):
    before = snapshot(tmp_path)
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text("")
    assert any("temporary files" in f for f in _check(case, tmp_path, before))


@pytest.mark.parametrize("code", [2, 70, -2])
def test_a_failed_run_creates_nothing(case, tmp_path, code):
    before = snapshot(tmp_path)
    (tmp_path / "new" / "sub").mkdir(parents=True)
    assert any("created" in f for f in _check(case, tmp_path, before, code=code))


def test_a_file_beside_the_outputs(case, tmp_path):
    before = snapshot(tmp_path)
    (tmp_path / "other.csv").write_text("a\n")
    assert any("outside the outputs" in f for f in _check(case, tmp_path, before))


@pytest.mark.parametrize("what", ["parquet", "png", "ndjson_gz_cut", "md_empty"])
def test_a_half_written_output(tmp_path, what):
    import polars as pl

    out = tmp_path / "out"
    out.mkdir()
    if what == "parquet":
        pl.DataFrame({"a": [1, 2]}).write_parquet(out / "ledger.parquet")
        data = (out / "ledger.parquet").read_bytes()
        (out / "ledger.parquet").write_bytes(data[: len(data) // 2])
    elif what == "png":
        (out / "pool.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    elif what == "ndjson_gz_cut":
        (out / "events.ndjson").write_bytes(gzip.compress(b'{"a": 1}\n')[:5])
    else:
        (out / "report.md").write_text("")
    case = Case(["report", "x", "-o", str(out)], [], [out])
    found = _check(case, tmp_path, {}, code=0)
    assert any("does not read back" in f for f in found), found


def test_a_run_over_its_time(case, tmp_path):
    r = run_case(case, tmp_path, limit=1e-4)
    assert r.code == -1 and r.problems == ["over 0 s"]


def test_a_whole_ndjson_file_with_a_late_value_reads_back(tmp_path):
    rows = [{"a": None}] * 200 + [{"a": 1}]
    out = tmp_path / "out.ndjson"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    case = Case(["parse", "x", "-o", str(out)], [], [out])
    assert _check(case, tmp_path, {}, code=0) == []
    out.write_text(out.read_text()[:-3])
    assert any("does not read back" in f for f in _check(case, tmp_path, {}, code=0))
