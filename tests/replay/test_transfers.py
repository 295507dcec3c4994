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
        finishes.append((t, float(t), 64 * g))  # a round a second
    # each rise is read at the first round after its transfer ended
    frees = [(r + latency + 1, ft + latency, n) for r, ft, n in finishes]
    med, (q1, q3) = estimate_latency(frees, finishes)
    assert med == latency and q1 == q3 == latency


def test_too_little_evidence_gives_none():
    assert estimate_latency([(1, 1.0, 64)] * 5, [(0, 0.0, 64)] * 5) is None


def test_a_request_that_finished_in_the_round_that_shows_a_rise_did_not_pay_for_it():
    """A rise is read before its round's forward. Here each round shows a rise larger than
    the one request the round before finished (rises need not match finished requests'
    sizes: page rounding, shared prefixes), and each round finishes one at the same stamp:
    paying the rest of the rise out of that one would read a 0 s transfer."""
    finishes = [(i, float(i), 64) for i in range(60)]
    frees = [(i, float(i), 96) for i in range(1, 61)]
    med, (q1, q3) = estimate_latency(frees, finishes)
    assert med == q1 == q3 == 1.0


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 500)), min_size=0, max_size=200),
    st.integers(-1, 700),
)
def test_traffic_before_is_the_rounds_before_without_copies(steps, cut):
    """The views ``Traffic.before`` gives hold exactly the entries of earlier rounds, in
    order, and the latency read off them is the one read off plain lists."""
    from kvforensics.model import Config
    from kvforensics.replay.transfers import Traffic

    cfg = Config(page_size=64, chunked_prefill_size=4096, max_prefill_tokens=16384, pool_size=65536)
    traffic, index, rows = Traffic(cfg), 0, []
    for i, (skip, tokens) in enumerate(steps):
        index += skip  # several entries may share a round; rounds only grow
        t = float(i)
        traffic.frees.push(index, t + 2.0, tokens)
        traffic.finishes.push(index, t, tokens)
        rows.append((index, t, tokens))
    frees, finishes = traffic.before(cut)
    want_frees = [(i, t + 2.0, n) for i, t, n in rows if i < cut]
    want_finishes = [(i, t, n) for i, t, n in rows if i < cut]
    assert list(frees) == want_frees and len(frees) == len(want_frees)
    assert list(finishes) == want_finishes and len(finishes) == len(want_finishes)
    assert estimate_latency(frees, finishes) == estimate_latency(want_frees, want_finishes)
