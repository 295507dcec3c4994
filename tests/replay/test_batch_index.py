"""The batch-size index gives what a scan of every other rank's batch line gives."""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from kvforensics.rounds.batch_index import NEAR_BATCH_S, BatchSizes

T0 = datetime(2026, 11, 2, 15, 16, 0)


def scan(lines: list[dict], deciding: str, time, least: int, most: int):
    """Every line read in the logs' order: the old linear lookup, as the reference."""
    if time is None:
        return None
    near = {
        b["new_token"]: f"{b['file'].rsplit('/', 1)[-1]}:{b['line']}"
        for b in lines
        if b["kind"] == "prefill_batch"
        and b["rank"] != deciding
        and b["new_token"] is not None
        and b["time"] is not None
        and abs((b["time"] - time).total_seconds()) <= NEAR_BATCH_S
        and least <= b["new_token"] <= most
    }
    return next(iter(near.items())) if len(near) == 1 else None


line = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["prefill_batch", "prefill_batch", "adder_check"]),
        "rank": st.sampled_from(["PP0", "PP3", "PP1"]),
        "file": st.sampled_from(["/logs/a/pp3.log", "pp1.log", "/x/pp0.log"]),
        "time": st.one_of(
            st.none(), st.integers(0, 40_000).map(lambda ms: T0 + timedelta(milliseconds=ms))
        ),
        "new_token": st.one_of(st.none(), st.integers(0, 12)),
    }
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(line, max_size=60),
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(-6_000, 46_000)),
            st.integers(0, 12),
            st.integers(0, 12),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_index_agrees_with_a_scan(lines, queries):
    for i, b in enumerate(lines):
        b["line"] = i + 1
    frame = pl.DataFrame(
        lines,
        schema={"kind": pl.String, "rank": pl.String, "file": pl.String,
                "time": pl.Datetime("ms"), "new_token": pl.Int64, "line": pl.Int64},
    )  # fmt: skip
    index = BatchSizes.of(frame, "PP0")
    for ms, a, b in queries:
        time = None if ms is None else T0 + timedelta(milliseconds=ms)
        least, most = min(a, b), max(a, b)
        assert index.near(time, least, most) == scan(lines, "PP0", time, least, most)


def test_the_last_of_equal_lines_is_where_and_disagreeing_ones_give_none():
    frame = pl.DataFrame(
        {
            "kind": ["prefill_batch"] * 4,
            "rank": ["PP3"] * 4,
            "file": ["/l/pp3.log"] * 4,
            "time": [T0 + timedelta(seconds=s) for s in (3, 1, 2, 30)],
            "new_token": [500, 500, 700, 500],
            "line": [10, 11, 12, 13],
        }
    )
    index = BatchSizes.of(frame, "PP0")
    assert index.near(T0, 400, 600) == (500, "pp3.log:11")
    assert index.near(T0, 400, 800) is None  # 500 and 700 both fit
    assert index.near(T0, 800, 900) is None
    assert index.near(T0 + timedelta(seconds=29), 400, 600) == (500, "pp3.log:13")
    assert len(index) == 4
