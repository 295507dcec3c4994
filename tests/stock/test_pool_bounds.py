"""Property: the pool size bounded from decode lines always contains the true size."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvforensics.logs import load_catalogue
from kvforensics.logs.samples import parse_sample
from kvforensics.replay.stock import StockContradiction, pool_size

CAT = load_catalogue()


@settings(max_examples=150, deadline=None)
@given(
    pool=st.integers(64, 10**8),
    used=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6),
)
def test_bounds_hold_the_pool(pool, used):
    lines = []
    for i, frac in enumerate(used):
        t = int(frac * pool)
        lines.append(
            f"[2026-01-01 00:00:{i:02d} TP0] Decode batch, #running-req: 3, #token: {t}, "
            f"token usage: {t / pool:.2f}, cuda graph: True, gen throughput (token/s): 1.00, "
            "#queue-req: 0"
        )
    events, _ = parse_sample(CAT, "\n".join(lines))
    notes: list[StockContradiction] = []
    p = pool_size(events, None, notes)
    assert notes == []
    if p.interval is not None:
        lo, hi = p.interval
        assert lo <= pool <= hi
        assert p.value in (None, pool)
