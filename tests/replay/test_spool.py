"""The spooled columns that stand in for the rounds a streamed replay does not keep: rows
come back as pushed, while memory holds fewer than a chunk of them."""

import statistics
from collections import Counter
from datetime import datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from kvforensics.replay.transfers import median_and_quartiles
from kvforensics.replay.whole_log import Margin, Margins, lowest_per_stretch
from kvforensics.rounds import Round, compact
from kvforensics.rounds.compact import Spool

ROWS = st.tuples(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), st.booleans())


@given(st.lists(ROWS, max_size=300), st.integers(1, 40))
def test_rows_come_back_in_order_and_memory_holds_less_than_a_chunk(rows, chunk):
    sp = Spool("qdb", chunk)
    for row in rows:
        sp.push(*row)
        assert sp.held < chunk
    assert len(sp) == len(rows)
    assert list(sp.rows()) == [(i, x, int(b)) for i, x, b in rows]
    assert list(sp.rows()) == list(sp.rows())  # read back again, the same


def test_without_a_temporary_directory_the_rows_stay_in_memory(monkeypatch, tmp_path):
    monkeypatch.setattr(compact.tempfile, "tempdir", str(tmp_path / "missing"))
    sp = Spool("q", 4)
    for i in range(10):
        sp.push(i)
    assert sp.held == 10 and list(sp.rows()) == [(i,) for i in range(10)]


MARGINS = st.lists(
    st.tuples(st.integers(-500, 500), st.integers(0, 50), st.booleans()), max_size=700
)


@given(MARGINS, st.integers(1, 300), st.integers(1, 64))
def test_margins_picked_from_the_spool_are_those_of_the_whole_list(steps, points, chunk):
    t0 = datetime(2026, 11, 2, 15, 0, 0)
    ms, every = Margins(), []
    ms.rows = Spool(ms.rows.codes, chunk)
    for i, (left, tails, oom) in enumerate(steps):
        at = t0 + timedelta(seconds=i) if i % 3 else None
        ms.add(Round(i * 2, at), left, tails, oom)
        when = at.isoformat(sep=" ") if at else None
        every.append(Margin(i * 2, when, left, tails, left - tails, oom=oom))
    assert ms.rows.held < chunk
    assert ms.lowest_per_stretch(points) == lowest_per_stretch(every, points)


@given(st.lists(st.integers(0, 40).map(lambda k: k / 4), min_size=2, max_size=400))
def test_median_and_quartiles_from_counts_are_the_statistics_modules(values):
    q = statistics.quantiles(values, n=4)
    assert median_and_quartiles(Counter(values)) == (statistics.median(values), (q[0], q[2]))
