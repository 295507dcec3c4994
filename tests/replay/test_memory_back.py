"""Silent rounds where memory came back: a KV transfer that ends between two rounds
returns its slots to the evictable cache, so a chunked request's next piece can be longer
than the baseline the last known round left. The AttentionStore write shows it; the
rebuild then raises the baseline to what the piece needs (an interval, inferred) rather
than calling the write a contradiction, and invents no round the write does not need.

Both cases are agent-traffic nodes the project's own model wrote (seeds and sizes the
scan's property test drew), so the rebuilt pieces must be the run's own."""

import pytest

from kvforensics.rounds import from_logs
from kvforensics.synth.agent import agent_capture, write_agent_node

CASES = [  # (seed, align): page 64, chunk 4096
    (239, 128),  # a write past what the assumed baseline gives
    (205, 512),  # an in-block silent round, then a forced piece, were invented
]


@pytest.mark.parametrize(("seed", "align"), CASES)
def test_the_pieces_are_the_runs_own_and_nothing_contradicts(tmp_path, seed, align):
    sizes = dict(page_size=64, align_size=align, chunked_prefill_size=4096,
                 max_prefill_tokens=4096)  # fmt: skip
    paths = write_agent_node(tmp_path, seed=seed, requests=120, **sizes)
    rb = from_logs(paths).rebuild
    assert rb.contradictions == []
    truth = [rc.pieces for rc in agent_capture(seed, 120, **sizes).rounds if rc.pieces]
    assert [[(p.rid, p.start, p.end) for p in r.pieces] for r in rb.rounds] == truth
    rose = [r for r in rb.rounds if r.baseline and r.baseline.interval]
    assert rose, "the write that needs more memory than was assumed is not found"
    for r in rose:
        least, most = r.baseline.interval
        assert r.baseline.value == least <= most <= rb.cfg.pool_size
        assert "memory came back" in r.baseline.evidence[0]
        assert r.baseline_end.value >= 0
