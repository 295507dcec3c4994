"""The one home of gap detection (``causes.gaps``), the out-of-memory's words
(``causes.oom``) and the key-read count the typed records keep at its floor."""

import subprocess
import sys
from pathlib import Path

from kvforensics.causes.gaps import entered_after, leaves_gap, through_gaps, unreserved
from kvforensics.causes.oom import OomFigures, oom_words
from kvforensics.model.decisions import Call, Decision
from kvforensics.model.ledger import Step

ROOT = Path(__file__).resolve().parents[2]


def _step(n: int, rid: str, decision: Decision, **kw) -> Step:
    return Step(round=7, step=n, call=Call.ADD_ONE_REQ, rid=rid, decision=decision, **kw)


CUT = _step(1, "b", Decision.TRUNCATED, seq_len=100, end=40, rem_chunk_after=16)
INTRUDER = _step(2, "c", Decision.FULL, start=0, end=10)
REFUSED = _step(3, "d", Decision.REJECTED)


def test_a_truncation_with_budget_left_and_its_tail_unreserved_is_a_gap():
    assert unreserved(CUT) == 60 and leaves_gap(CUT)
    assert not leaves_gap(CUT._replace(rem_chunk_after=0))
    assert unreserved(CUT._replace(reserved_tail=61)) == 0  # the fix reserved it
    assert unreserved(INTRUDER) == 0


def test_admissions_after_the_gap_are_the_ones_through_it():
    steps = [_step(0, "a", Decision.FULL), CUT, INTRUDER, REFUSED]
    assert list(through_gaps(steps)) == [(CUT, INTRUDER)]
    assert entered_after(steps, CUT) == [INTRUDER]


def test_the_out_of_memory_reads_the_same_wherever_it_is_said():
    assert oom_words(2056, 0) == "2056 tokens, 0 available"
    assert oom_words(2056, 0, rid="x", form="with") == "x tried to allocate 2056 tokens with 0 available"
    assert oom_words(2056, 0, form="allocating") == "allocating 2056 (0 available)"
    assert oom_words(2056, 0, rid="x", form="needs") == "x needs 2,056, 0 available"


def test_the_observed_oom_json_names_a_second_pool_only_when_logged():
    o = OomFigures(round=3, rid="x", tokens=8, available=0)
    assert list(o.as_dict()) == ["round", "rid", "tokens", "available"]
    swa = OomFigures(round=3, rid="x", tokens=8, available=0, swa_available=4)
    assert swa.as_dict()["swa_available"] == 4


def test_no_string_key_read_of_a_stage_result_outside_the_json_edge():
    """What is left: polars column reads, maps keyed by policy or setting name, the
    manifest's own JSON; a new read of a record by string key raises the count."""
    paths = ["kvforensics/causes", "kvforensics/report", "kvforensics/scan/report.py",
             "kvforensics/scan/plots.py", "kvforensics/plotting.py"]  # fmt: skip
    out = subprocess.run(
        [sys.executable, "scripts/count_key_reads.py", *paths, "--total"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert int(out.splitlines()[-1].split()[0]) <= 9, out
