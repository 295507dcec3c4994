"""A case: a scenario's facts as a value, written as scenario tables and read back."""

from __future__ import annotations

import tomllib

import pytest

from kvforensics.errors import InputError
from kvforensics.reproduce.case import from_node, from_scenario
from kvforensics.reproduce.toml_out import dumps
from kvforensics.scenario import load_scenario, parse_scenario
from tests.cli.test_options import INPUT_FLAGS, flags
from tests.conftest import FIXTURES

SCENARIOS = FIXTURES / "scenarios"


@pytest.mark.parametrize("name", ["incident-2026-11-02", "postmortem-abc", "prefix-counterexample"])
def test_tables_round_trip_and_run_the_same(name):
    sc = load_scenario(SCENARIOS / f"{name}.toml")
    case = from_scenario(sc)
    again = from_scenario(parse_scenario(tomllib.loads(dumps(case.tables("d"))), name=sc.name))
    assert again == case
    for policy in ("prefix", "fixed"):
        a, b = sc.build_node(policy).run(), case.node(policy).run()
        assert (a.oom and a.oom.as_dict()) == (b.oom and b.oom.as_dict())
        assert [r.pieces for r in a.rounds] == [r.pieces for r in b.rounds]


def test_a_running_node_is_a_case_that_runs_on_the_same():
    """Caught mid-run (round 1 of the incident: B resumes, C waits behind nothing), the
    node's state as a case gives the rest of the run."""
    sc = load_scenario(SCENARIOS / "incident-2026-11-02.toml")
    node = sc.build_node("prefix")
    node.step()
    case = from_node(node, "mid")
    assert case.chunked.rid == "as-1keim4u1e8" and case.chunked_done == 89088
    # the 17 transfers of the start, and A and C, which finished in round 0
    assert len(case.inflight) == 19 and case.pool_size == 262144
    rest = case.node("prefix").run()
    assert rest.oom.as_dict() | {"round": 0} == {
        "round": 0, "rid": "as-1keim4u1e8", "tokens": 2056, "available": 0,
    } and rest.oom.round == 2  # fmt: skip


def test_outside_rows_of_one_round_add_up():
    data = {
        "config": {"page_size": 16, "chunked_prefill_size": 256, "max_prefill_tokens": 256,
                   "pool_size": 4096},
        "waiting": [{"rid": "v", "seq_len": 100}],
        "outside": [{"before_round": 2, "tokens": 64}, {"before_round": 2, "tokens": 32}],
    }  # fmt: skip
    assert parse_scenario(data).outside == {2: 96}
    data["outside"] = [{"before_round": -1, "tokens": 64}]
    with pytest.raises(InputError, match="outside"):
        parse_scenario(data)


def test_the_toml_writer_refuses_what_would_not_load():
    case = from_scenario(load_scenario(SCENARIOS / "postmortem-abc.toml"))
    bad = case.tables() | {"pool": {"free": case.pool_size + 64, "evictable": 0}}
    with pytest.raises(InputError):
        dumps(bad)


def test_reproduce_takes_the_log_input_flags():
    have = flags("reproduce")
    assert have >= INPUT_FLAGS and {"--policy", "--target", "-o"} <= have


def test_a_resumed_chunk_at_the_start_is_reduced_through_its_resumed_gap():
    """``late_gap`` caught at round 1: the victim resumes first and the intruder comes in
    after its resumed piece; the reduction keeps that call as the gap."""
    from kvforensics.reproduce.shrink import Shrinker
    from kvforensics.synth.incidents import INCIDENTS

    node = INCIDENTS["late_gap"]().build("prefix")
    node.step()
    case = from_node(node, "late-gap-mid")
    assert case.chunked.rid == "as-b" and case.chunked_done > 0
    sh = Shrinker(case, "fixed").run()
    lk = sh.chain.link
    assert lk.call == "add_chunked_req" and lk.victim == "as-b" and lk.intruder == "as-c"
    assert sh.case.chunked is not None and len(sh.case.requests()) == 2
