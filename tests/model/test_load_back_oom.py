"""A host hit's load-back that finds no slot it may take is the round's out-of-memory,
pinned on that request, under every policy (not an exception out of the run)."""

import pytest

from kvforensics.model import Config, Request, get_policy, start_node
from kvforensics.model.node import NodeState

CFG = Config(
    page_size=64,
    chunked_prefill_size=4096,
    max_prefill_tokens=4096,
    pool_size=16384,
    align_size=256,
)


@pytest.mark.parametrize("policy", ["prefix", "fixed", "upstream", "drain", "park"])
def test_load_back_into_unevictable_slots_is_an_out_of_memory(policy):
    # the baseline counts 8192 slots, but 6144 of them cannot be evicted: a load-back of
    # 4096 passes the adder's budget check and then finds 2048
    state = NodeState(
        free=2048,
        unevictable=6144,
        waiting=(Request("small", 512), Request("hit", 6000, host_hit=4096)),
    )
    node = start_node(CFG, get_policy(policy), state)
    res = node.run(max_rounds=10)
    assert res.oom is not None
    assert (res.oom.round, res.oom.rid, res.oom.tokens) == (0, "hit", 4096)
    # what the message says was available: the free slots and the ones stuck
    assert res.oom.available == res.oom.available_size + res.oom.evictable_size
    last = res.ledger_frame().tail(1).row(0, named=True)
    assert (last["rid"], last["budget_state"]) == ("hit", "OOM")
