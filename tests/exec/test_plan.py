from __future__ import annotations

import pytest

from kvforensics.errors import InputError
from kvforensics.exec import PoolSnapshot, plan_from_run
from kvforensics.model import PoolOp


def test_incident_plan_shape(incident_plans):
    plan = incident_plans["prefix"]
    kinds = [s.kind for s in plan.steps]
    assert kinds[:3] == ["lock", "load_back", "load_back"]
    assert plan.rounds == [0, 1, 2, 3]
    last = plan.steps[-1]
    # the failed batch comes from the adder's decision, not from the oom op
    assert last.kind == "batch" and last.pieces == (("as-1keim4u1e8", 91968, 94024),)
    assert plan.snapshot.free == 98304
    assert dict(plan.snapshot.evictable) == {"cache": 10112, "prefix:as-1keim4u1e8": 12992}
    assert sum(t for _, t in plan.snapshot.held) == 140736


def test_plan_from_ops_groups_batches_and_releases():
    snap = PoolSnapshot(size=1024, page_size=64, free=1024)
    ops = [
        PoolOp(0, "alloc", owner="a", start=0, end=100, tokens=128),
        PoolOp(0, "evict", key="x", tokens=64),
        PoolOp(0, "alloc", owner="b", start=0, end=64, tokens=64),
        PoolOp(1, "alloc", owner="a", start=100, end=200, tokens=128),
        PoolOp(1, "release", owner="a", key="kv:a", tokens=128),
        PoolOp(1, "free", owner="a", tokens=128),
        PoolOp(2, "oom", tokens=5),
    ]
    plan = plan_from_run(snap, ops, attempted=[(2, "b", 64, 69)])
    assert [(s.kind, s.round) for s in plan.steps] == [
        ("batch", 0),
        ("batch", 1),
        ("release", 1),
        ("batch", 2),
    ]
    assert plan.steps[0].pieces == (("a", 0, 100), ("b", 0, 64))
    assert plan.steps[2].entries == (("kv:a", 128),)


def test_plan_rejects_mismatched_config():
    from kvforensics.model import Config

    cfg = Config(page_size=32, chunked_prefill_size=64, max_prefill_tokens=64, pool_size=1024)
    with pytest.raises(InputError):
        plan_from_run(PoolSnapshot(size=1024, page_size=64, free=1024), [], cfg)
