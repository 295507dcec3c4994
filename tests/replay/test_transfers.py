"""The KV transfer time read off the traffic: rises of the baseline paid out of finished
requests in finishing order."""

from hypothesis import given
from hypothesis import strategies as st

from kvforensics.replay.transfers import estimate_latency


@given(st.integers(0, 20), st.lists(st.integers(1, 50), min_size=30, max_size=80))
def test_recovers_a_constant_latency(latency, gaps):
    t, finishes = 0, []
    for g in gaps:
        t += g
        finishes.append((float(t), 64 * g))
    frees = [(ft + latency, n) for ft, n in finishes]
    med, (q1, q3) = estimate_latency(frees, finishes)
    assert med == latency and q1 == q3 == latency


def test_too_little_evidence_gives_none():
    assert estimate_latency([(1.0, 64)] * 5, [(0.0, 64)] * 5) is None
