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


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 6), min_size=2, max_size=30),
    st.integers(0, 3),
    st.data(),
)
def test_rounds_seated_on_one_line_a_round(sizes, shown_every, data):
    """PP3 prints one line a round, all in one second here: once a round the logs show
    is seated on its line, each later round's line is the next one, whatever other line
    near it prints the same size; a round the rebuild sized itself moves the seat on."""
    frame = pl.DataFrame(
        {
            "kind": ["prefill_batch"] * len(sizes),
            "rank": ["PP3"] * len(sizes),
            "file": ["/l/pp3.log"] * len(sizes),
            "time": [T0] * len(sizes),
            "new_token": sizes,
            "line": list(range(1, len(sizes) + 1)),
        }
    )
    index = BatchSizes.of(frame, "PP0")
    first = sizes.index(sizes[0]) == 0 and sizes.count(sizes[0]) == 1
    index.ran(T0, sizes[0], shown=True)  # the first round: its pieces shown
    for k in range(1, len(sizes)):
        ahead = data.draw(st.integers(0, len(sizes) - k - 1))
        got = index.size(T0, 1, 6, ahead)
        if first:
            # seated by the only line of its size: the next lines are the next rounds'
            assert got == (sizes[k + ahead], f"pp3.log:{k + ahead + 1}")
        shown = shown_every and k % shown_every == 0
        index.ran(T0, sizes[k], shown=bool(shown))
    if first:
        assert index.size(T0, 1, 6) == index.near(T0, 1, 6)  # past the last line: by time
