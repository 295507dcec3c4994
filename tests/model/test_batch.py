"""``PrefillNode.batch`` is ``step`` without the forward pass: a one-round re-run reads the
same steps and the same out-of-memory from it; the positional records equal the named ones."""

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvforensics.model import OutOfMemory
from kvforensics.model.ledger import Step, allocation
from tests.model.strategies import build, scenarios

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenarios(), st.sampled_from(["prefix", "fixed", "upstream", "drain", "park"]),
       st.integers(0, 6))  # fmt: skip
def test_batch_records_what_step_records(data, policy, rounds_before):
    node = build(data, policy)
    for _ in range(rounds_before):
        out = node.step()
        if out is None or isinstance(out, OutOfMemory):
            return
    node._wait_for_work()  # what step does first (a re-run starts with its work there)
    stepped, batched = node, copy.deepcopy(node)
    n = len(stepped.ledger.rows)
    out = stepped.step()
    got = batched.batch()
    assert batched.ledger.rows[n:] == stepped.ledger.rows[n:]
    assert got.adder.steps == [r for r in stepped.ledger.rows[n:] if r.call != "allocate"]
    if isinstance(out, OutOfMemory):
        assert got.oom is not None and got.oom.as_dict() == out.as_dict()
        assert got.oom.message == out.message
    else:
        assert got.oom is None
        assert got.pieces == (out.pieces if out is not None else [])
    assert batched.pool.baseline() == stepped.pool.baseline()


@given(st.integers(0, 10**6), st.integers(1, 99), st.text(min_size=1, max_size=8),
       st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6),
       st.integers(0, 10**6), st.integers(0, 10**6))  # fmt: skip
def test_allocation_record_is_the_named_one(rnd, step, rid, start, end, slots, before, after):
    named = Step(round=rnd, step=step, call="allocate", rid=rid, start=start, end=end,
                 allocated=slots, baseline=before, baseline_after=after)  # fmt: skip
    assert allocation(rnd, step, rid, start, end, slots, before, after) == named
    assert len(named) == len(Step._fields)
