"""The incident of 2026-11-02, re-run from round R's state under each policy."""

import polars as pl
import pytest

from kvforensics.scenario import load_scenario
from tests.conftest import FIXTURES

A, B, C = "as-v9ujq2m0c1", "as-1keim4u1e8", "as-xpkq7d03n5"


@pytest.fixture(scope="module")
def scenario():
    return load_scenario(FIXTURES / "scenarios" / "incident-2026-11-02.toml")


def run(scenario, policy, rounds=20):
    return scenario.build_node(policy).run(rounds)


def adder_rows(result, round_no):
    df = result.ledger.to_frame()
    return df.filter((pl.col("round") == round_no) & (pl.col("call") == "add_one_req"))


def pieces_of(result, rid):
    return [(r.round, s, e) for r in result.rounds for (x, s, e) in r.pieces if x == rid]


def test_prefix_round_r_ledger(scenario):
    res = run(scenario, "prefix")
    rows = adder_rows(res, 0)
    assert rows["rid"].to_list() == [A, B, C]
    assert rows["baseline"].to_list() == [121408, 108416, 34624]
    assert rows["rem_total_tokens"].to_list() == [121408, 94463, 18303]
    assert rows["cur_rem_tokens"].to_list() == [121408, 94464, 18304]
    assert rows["decision"].to_list() == ["full", "truncated", "full"]
    assert rows["rem_chunk_tokens"].to_list() == [16384, 2496, 192]
    b = rows.row(1, named=True)
    assert (b["start"], b["end"], b["load_back"], b["reserved_tail"]) == (86784, 89088, 73792, 0)
    c = rows.row(2, named=True)
    assert (c["load_back"], c["budget_state"]) == (15360, "OTHER")
    # After R's allocation (13888 + 2304 + 192 slots) the pool has 2880 left.
    assert res.rounds[0].baseline_end == 2880


def test_prefix_runs_out_at_r_plus_3(scenario):
    res = run(scenario, "prefix")
    assert pieces_of(res, B) == [(0, 86784, 89088), (1, 89088, 91904), (2, 91904, 91968)]
    assert res.oom is not None
    assert res.oom.as_dict() == {"round": 3, "rid": B, "tokens": 2056, "available": 0}
    assert "Try to allocate 2056 tokens." in res.oom.message
    assert res.oom.message.endswith(
        "Available full tokens: 0 (full_available_size=0 + full_evictable_size_=0)"
    )
    forced = res.ledger.to_frame().filter(pl.col("round") == 3, pl.col("call") == "add_chunked_req")
    assert forced["forced"].to_list() == [True]
    # 2816 + 64 + 2056: exactly the unreserved tail.
    assert 2816 + 64 + 2056 == 94024 - 89088


def test_fixed_refuses_c_and_b_finishes(scenario):
    res = run(scenario, "fixed")
    rows = adder_rows(res, 0)
    b, c = rows.row(1, named=True), rows.row(2, named=True)
    assert b["reserved_tail"] == 4992 + 1
    assert (c["decision"], c["budget_state"], c["rem_total_tokens"]) == (
        "rejected",
        "NO_TOKEN",
        13310,
    )
    assert c["load_back"] == 0
    assert not any(op.op == "load_back" and op.owner == C and op.round == 0 for op in res.pool.ops)
    assert pieces_of(res, B) == [(0, 86784, 89088), (1, 89088, 94024)]
    assert res.oom is None
    assert res.requests[C].finished_round is not None  # C runs once transfers free memory


def test_upstream_spends_the_budget(scenario):
    res = run(scenario, "upstream")
    rows = adder_rows(res, 0)
    assert rows["rid"].to_list() == [A, B]  # C is not examined in R
    assert (rows["end"][1] - rows["start"][1], rows["budget_state"][1]) == (2496, "OTHER")
    assert res.oom is None


def test_drain_ends_the_round(scenario):
    res = run(scenario, "drain")
    rows = adder_rows(res, 0)
    assert rows["rid"].to_list() == [A, B]
    assert rows["budget_state"].to_list()[-1] == "OTHER"
    assert res.oom is None
    assert pieces_of(res, B) == pieces_of(run(scenario, "fixed"), B)


def test_runs_are_deterministic(scenario):
    a = run(scenario, "prefix").ledger.to_frame()
    b = run(scenario, "prefix").ledger.to_frame()
    assert a.equals(b)


def test_postmortem_example(fixtures):
    sc = load_scenario(fixtures / "scenarios" / "postmortem-abc.toml")
    pre = sc.build_node("prefix").run(20)
    rows = adder_rows(pre, 0)
    assert rows["decision"].to_list() == ["full", "truncated", "full"]
    assert rows["end"][1] == 2816 and rows["rem_chunk_after"][1] == 192
    assert rows["rem_total_tokens"][2] == 7967
    assert pre.oom is not None and pre.oom.rid == "B"
    fix = sc.build_node("fixed").run(20)
    c = adder_rows(fix, 0).row(2, named=True)
    assert (c["rem_total_tokens"], c["budget_state"]) == (2782, "NO_TOKEN")
    assert fix.oom is None
