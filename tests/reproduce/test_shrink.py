"""The shrinking: model-checked, deterministic, and the chain kept."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvforensics.errors import InputError
from kvforensics.reproduce.case import Ask, from_scenario
from kvforensics.reproduce.chain import OUTSIDE, TAIL, find_chain, finished, run
from kvforensics.reproduce.shrink import Shrinker, candidates, halves
from kvforensics.scenario import load_scenario, parse_scenario
from tests.conftest import FIXTURES
from tests.model.strategies import scenarios

ABC = FIXTURES / "scenarios" / "postmortem-abc.toml"


@given(st.integers(0, 10_000), st.integers(0, 100), st.integers(1, 64))
def test_candidates_go_down_on_the_grid(v, lo, step):
    got = list(candidates(v, lo, step))
    assert len(got) == len(set(got))
    assert all(lo <= c < v for c in got)
    assert all(c == lo or c % step == 0 for c in got)
    if v > lo:
        assert got[0] == lo  # the largest cut first


def test_halves_stop_at_the_floor():
    assert list(halves(256, 64)) == [128, 64]
    assert list(halves(48, 1)) == [24, 12, 6, 3]


def test_postmortem_example_keeps_its_chain():
    case = from_scenario(load_scenario(ABC))
    sh = Shrinker(case, "fixed").run()
    ch = sh.chain
    assert ch.kind == TAIL and ch.link.victim == "B" and ch.link.intruder == "C"
    assert ch.link.call == "add_one_req" and ch.link.load_back > 0 and ch.link.gap > 0
    # A only used chunk budget: B's own truncation leaves the gap once the sizes shrink
    assert [a.rid for a in sh.case.waiting] == ["B", "C"]
    assert sh.case.pool_size < case.pool_size
    assert run(sh.case, "prefix").oom.rid == "B"
    assert finished(run(sh.case, "fixed"))
    # every kept step was checked: the last kept case is the result
    assert sum(t.kept for t in sh.tried) > 0
    assert Shrinker(case, "fixed").run().case == sh.case


def test_a_size_that_cannot_go_lower_says_why():
    sh = Shrinker(from_scenario(load_scenario(ABC)), "fixed").run()
    held = {t.what.split(" ")[0]: t for t in sh.held_back()}
    assert "chunked_prefill_size" in held
    t = held["chunked_prefill_size"]
    was, to = (int(x) for x in t.what.split(" ", 1)[1].split(" -> "))
    assert was == sh.case.size("chunked_prefill_size") and to < was and not t.kept and t.why
    # and indeed: at that size the chain is gone
    assert find_chain(sh.case.with_sizes(chunked_prefill_size=to), "fixed") is None


def test_no_chain_is_one_line():
    case = from_scenario(load_scenario(ABC))
    with pytest.raises(InputError, match="no out-of-memory under prefix"):
        Shrinker(replace(case, free=case.free * 4), "fixed")


def test_outside_allocation_chain_needs_the_allocation():
    data = {
        "config": {"page_size": 16, "align_size": 64, "chunked_prefill_size": 256,
                   "max_prefill_tokens": 256, "pool_size": 4096},
        "pool": {"free": 2048},
        "waiting": [{"rid": "v", "seq_len": 1800}],
        "outside": [{"before_round": 2, "tokens": 1024}],
    }  # fmt: skip
    case = from_scenario(parse_scenario(data))
    sh = Shrinker(case, "fixed").run()
    assert sh.chain.kind == OUTSIDE and sh.case.outside
    assert run(replace(sh.case, outside=()), "prefix").oom is None
    assert run(sh.case, "prefix").oom is not None


@st.composite
def gap_scenarios(draw):
    """Random nodes of the incident's shape, no numbers of it: a first request, a long one,
    and one that computes little but holds a host hit, at random sizes and alignments."""
    page = draw(st.sampled_from([1, 16, 32, 64]))
    align = page * draw(st.sampled_from([2, 4, 8]))
    chunk = page * draw(st.integers(8, 96))
    free = page * draw(st.integers(16, 400))
    first = draw(st.integers(1, chunk))
    # the long request and the host hit each within the pool: where a reserved tail decides
    long = draw(st.integers(chunk + 1, max(chunk + 1, free)))
    host = draw(st.integers(page, max(page, free)))
    data = {
        "config": {"page_size": page, "align_size": align, "chunked_prefill_size": chunk,
                   "max_prefill_tokens": chunk, "pool_size": free},
        "pool": {"free": free},
        "timing": {"round_overhead_s": 1.0, "transfer_latency_s": 3.0},
        "waiting": [
            {"rid": "a", "seq_len": first},
            {"rid": "b", "seq_len": long},
            {"rid": "c", "seq_len": host + draw(st.integers(1, page)), "host_hit_len": host},
        ],
    }  # fmt: skip
    return data


def _chain(data):
    return find_chain(from_scenario(parse_scenario(data, name="h")), "fixed")


@settings(max_examples=120, deadline=None)
@given(st.one_of(scenarios(max_requests=4), gap_scenarios()))
def test_random_scenarios_keep_their_chain(data):
    """Scenarios nobody wrote: whenever one shows the chain, its reduction shows the same
    chain, is no larger, and comes out the same twice."""
    case = from_scenario(parse_scenario(data, name="hypothesis"))
    chain = find_chain(case, "fixed")
    if chain is None:
        return
    sh = Shrinker(case, "fixed").run()
    assert sh.chain.shape() == chain.shape()
    assert find_chain(sh.case, "fixed").shape() == chain.shape()
    assert len(sh.case.requests()) <= len(case.requests())
    assert sh.case.pool_size <= case.pool_size
    assert Shrinker(case, "fixed").run().case == sh.case


def test_random_scenarios_reach_the_chain():
    """The property above is not empty: random nodes of that shape do show the chain."""
    from hypothesis import find

    cfg = settings(max_examples=2000, deadline=None, database=None, derandomize=True)
    data = find(gap_scenarios(), lambda d: _chain(d) is not None, settings=cfg)
    assert _chain(data).link.intruder == "c"


def test_ask_defaults():
    assert Ask("x", 5).prefix_evictable
