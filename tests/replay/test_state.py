"""A model node built at a rebuilt round holds every slot of the pool once: the baseline,
the chunk the round resumes and the KV in transfer together make the pool."""

from kvforensics.replay.replay import _inflight
from kvforensics.replay.state import chunk_slots, node_at, resumed, shared_slots
from kvforensics.rounds import from_logs
from tests.replay.test_stream import INC


def _totals(node) -> tuple[int, int]:
    """(slots the node's pool accounts for, pool size)."""
    pool = node.pool
    pool.check()  # its own invariant: nothing counted twice, no more than the pool
    return pool.free + pool.evictable_size() + sum(pool.held.values()), pool.size


def test_a_round_that_resumes_a_chunk_does_not_count_its_slots_as_in_transfer():
    rb = from_logs([INC / "pp0.log"]).rebuild
    starts = [r for r in rb.rounds if resumed(r) is not None and r.baseline is not None]
    assert len(starts) > 100  # the traffic chunks long prompts all along
    for rnd in starts:
        notes: list[str] = []
        inflight = _inflight(rb, rnd, 4.0, 1.0, notes)
        node = node_at(rb, rnd, "prefix", inflight=inflight)
        base, size = rnd.baseline.value, rb.cfg.pool_size
        chunk, shared = chunk_slots(rb.cfg, rnd), shared_slots(rb.cfg, rnd)
        assert chunk > 0 and node.pool.held[resumed(rnd).rid] == chunk
        in_transfer = sum(n for _, n, _ in inflight)
        if base + chunk + shared > size:  # the estimates overlap: no transfer is made up
            assert in_transfer == 0
            continue
        assert _totals(node) == (size - shared, size), rnd.index
        assert in_transfer == size - base - chunk - shared
        assert f"- {chunk} held by the chunk it resumes" in notes[0]
    assert any(shared_slots(rb.cfg, r) for r in starts)  # a locked prefix is among them
