"""A result line carried on its check's row rebuilds the same rounds as the two lines fed
one by one."""

from __future__ import annotations

import functools
from datetime import datetime, timedelta

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvforensics.logs import read_events
from kvforensics.rounds import Rebuilder, read_config
from kvforensics.rounds.rows import Check, Result, rows_of
from tests.conftest import FIXTURES

PP0 = FIXTURES / "logs" / "incident" / "pp0.log"
T0 = datetime(2026, 11, 2, 15, 16, 0)


def _one_by_one(frame: pl.DataFrame) -> list[tuple]:
    """Rows of single-row frames: nothing can ride on another row."""
    return [row for i in range(frame.height) for row in rows_of(frame.slice(i, 1))]


def _rounds(cfg, rows) -> list[dict]:
    rb = Rebuilder(cfg)
    return [r.as_dict() for r in rb.stream(rows)] + [c.as_dict() for c in rb.contradictions]


def _frame(events: pl.DataFrame) -> pl.DataFrame:
    return events.filter(pl.col("rank") == "PP0").sort(["file", "line"])


@pytest.mark.slow  # every row of the 5 MB incident log as a frame of its own
def test_the_incident_rebuilds_the_same_with_results_carried():
    events, _ = read_events([PP0])
    cfg, _ = read_config(events, {})
    frame = _frame(events).filter(
        pl.col("kind").is_in(["adder_check", "adder_result", "hicache_load_back", "as_write", "oom"])
    )
    carried = list(rows_of(frame))
    assert any(isinstance(r, Check) and r.decided for r in carried)
    assert len(carried) < frame.height
    assert _rounds(cfg, carried) == _rounds(cfg, _one_by_one(frame))


line = st.tuples(
    st.sampled_from(["adder_check", "adder_result", "adder_result", "hicache_load_back"]),
    st.sampled_from(["a", "b"]),
    st.sampled_from(["full", "truncated", "rejected"]),
    st.integers(0, 3),
)


@functools.cache
def _incident_config():
    """The incident's sizes, read once: every example rebuilds with the same."""
    events, _ = read_events([PP0])
    return read_config(events, {})[0]


@settings(max_examples=150, deadline=None)
@given(st.lists(line, min_size=1, max_size=30))
def test_any_order_of_checks_and_results_rebuilds_the_same(lines):
    cfg = _incident_config()
    rows = []
    for i, (kind, rid, decision, k) in enumerate(lines):
        rows.append({
            "kind": kind, "file": "/l/pp0.log", "line": i + 1,
            "time": T0 + timedelta(seconds=i // 6), "rid": rid, "seq_len": 4096,
            "prefix_len": 0, "host_hit_len": 0, "rem_chunk_tokens": 16384 - 1024 * k,
            "baseline": 200_000, "rem_total_tokens": 190_000, "cur_rem_tokens": 190_001,
            "decision": decision if kind == "adder_result" else None,
            "result": ("CONTINUE" if k else "NO_TOKEN") if kind == "adder_result" else None,
            "extend_start": 0 if kind == "adder_result" and decision != "rejected" else None,
            "extend_end": 1024 * k if kind == "adder_result" and decision != "rejected" else None,
            "loaded": 64 * k if kind == "hicache_load_back" else None,
        })  # fmt: skip
    frame = pl.DataFrame(rows)
    carried = list(rows_of(frame))
    assert sum(isinstance(r, Result) for r in carried) <= sum(k == "adder_result" for k, *_ in lines)
    assert _rounds(cfg, carried) == _rounds(cfg, _one_by_one(frame))
