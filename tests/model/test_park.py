"""``park``: a resumed chunk that finds no memory waits for memory instead of being forced."""

import pytest

from kvforensics.model import (
    Config,
    Inflight,
    PagePool,
    PrefillAdder,
    PrefillNode,
    Request,
    get_policy,
)
from kvforensics.replay.verdict import first_token_delays

CFG = Config(
    page_size=64,
    chunked_prefill_size=1024,
    max_prefill_tokens=1024,
    pool_size=16384,
    align_size=256,
)


def _half_done(free: int, held_inflight: int, done_at: float = 5.0):
    """A request half computed, ``free`` slots left, one transfer holding the rest."""
    pool = PagePool(page_size=64, size=CFG.pool_size, free=free)
    half = Request("half", 4096)
    half.done = 2048
    half.admitted_round = -1
    pool.hold("half", 2048)
    pool.hold("sent", held_inflight)
    return pool, half, [Inflight("sent", done_at)]


@pytest.mark.parametrize("policy", ["prefix", "fixed", "park"])
def test_forced_branch_only_where_the_policy_does_not_park(policy):
    pool, half, _ = _half_done(free=0, held_inflight=CFG.pool_size - 2048)
    adder = PrefillAdder(CFG, get_policy(policy), pool)
    adder.add_chunked_req(half)
    if policy == "park":
        assert adder.pieces == [] and adder.new_chunked is half
        assert adder.budget.total_offset == 0 and adder.budget.rem_chunk == 1024
    else:
        assert [(s, e) for _, s, e in adder.pieces] == [(2048, 3072)]


def test_a_replaying_rank_follows_the_plan_and_never_parks_on_its_own_books():
    pool, half, _ = _half_done(free=0, held_inflight=CFG.pool_size - 2048)
    adder = PrefillAdder(CFG, get_policy("park"), pool, deciding=False)
    adder.add_chunked_req(half)
    assert [(s, e) for _, s, e in adder.pieces] == [(2048, 3072)]


def test_park_waits_for_the_transfer_and_finishes_where_prefix_crashes():
    runs = {}
    for policy in ("prefix", "park"):
        pool, half, flight = _half_done(free=0, held_inflight=CFG.pool_size - 2048)
        node = PrefillNode(CFG, get_policy(policy), pool, chunked=half, inflight=flight)
        runs[policy] = node.run(max_rounds=50)
    assert runs["prefix"].oom is not None and runs["prefix"].oom.rid == "half"
    park = runs["park"]
    assert park.oom is None
    assert park.requests["half"].finished_round is not None
    # the parked rounds ran no piece; the request resumed where it stood
    pieces = park.requests["half"].pieces
    assert pieces[0][1] == 2048 and pieces[-1][2] == 4096
    assert park.requests["half"].finished_time >= 5.0
    decisions = [d for r in park.rounds for _, _, d, _ in r.decisions]
    assert decisions[0] == "parked"


def test_first_token_cost_of_parking_is_reported():
    pool, half, flight = _half_done(free=1024, held_inflight=CFG.pool_size - 3072)
    base = PrefillNode(CFG, get_policy("prefix"), pool, chunked=half, inflight=flight).run(50)
    pool, half, flight = _half_done(free=1024, held_inflight=CFG.pool_size - 3072)
    park = PrefillNode(CFG, get_policy("park"), pool, chunked=half, inflight=flight).run(50)
    assert base.oom is not None and park.oom is None
    row = next(d for d in first_token_delays(base, park) if d.rid == "half")
    assert row.delay_s is None and row.note  # prefix never finished it
