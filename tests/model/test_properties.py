"""Invariants of the admission model, checked on generated scenarios.

The safety invariant ("every admitted request finishes without running out of memory")
needs these assumptions, all built into the strategy:
  1. nothing but this adder allocates from the pool (no decode batch, no other rank);
  2. memory comes back only through finished KV transfers (it is never taken away
     between rounds);
  3. free and evictable sizes, device prefixes and the chunk budget are whole pages;
  4. a request's memory check counts its whole remaining prompt (host hit included).
Under ``prefix`` it does not hold: hypothesis finds the incident's shape.
"""

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvforensics.scenario import load_scenario
from tests.conftest import FIXTURES
from tests.model.strategies import build, scenarios

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run_checked(data, policy):
    node = build(data, policy)
    while True:
        out = node.step()
        node.pool.check()
        if out is None or not hasattr(out, "pieces"):
            return node, out


@SETTINGS
@given(scenarios(), st.sampled_from(["fixed", "upstream", "drain"]))
def test_admitted_requests_finish_without_oom(data, policy):
    node, out = run_checked(data, policy)
    assert out is None, f"{policy}: {out}"
    for req in node.requests.values():
        if req.admitted_round is not None:
            assert req.finished_round is not None, req.rid


@SETTINGS
@given(scenarios(), st.sampled_from(["prefix", "fixed", "upstream", "drain"]))
def test_ledger_identities(data, policy):
    node, _ = run_checked(data, policy)
    df = node.ledger.to_frame().filter(pl.col("call") != "allocate")
    if df.is_empty():
        return
    assert (df["rem_total_tokens"] == df["baseline"] - df["total_offset_before"]).all()
    assert (df["cur_rem_tokens"] == df["baseline"] - df["cur_offset_before"]).all()
    assert (df["cur_rem_tokens"] >= df["rem_total_tokens"]).all()
    assert (df["total_offset_after"] >= df["cur_offset_after"]).all()
    # At most one chunked request per batch.
    for rec in node.rounds:
        unfinished = [rid for rid, _s, e in rec.pieces if e < node.requests[rid].seq_len]
        assert len(unfinished) <= 1
        # Pieces of a round never overlap what the request already computed.
        for rid, s, e in rec.pieces:
            assert 0 <= s < e <= node.requests[rid].seq_len


@SETTINGS
@given(scenarios())
def test_non_last_pieces_end_on_the_alignment_when_they_can(data):
    node, _ = run_checked(data, "prefix")
    align = node.cfg.align_size
    for rec in node.rounds:
        for rid, s, e in rec.pieces:
            if align and e < node.requests[rid].seq_len and e % align:
                # Only when aligning would reach the start is the unaligned end kept.
                assert e // align * align <= s


def test_prefix_counterexample_regression():
    """The shrunk counterexample hypothesis found for ``prefix``, kept as a fixture."""
    sc = load_scenario(FIXTURES / "scenarios" / "prefix-counterexample.toml")
    pre = sc.build_node("prefix").run()
    assert pre.oom is not None
    admitted = pre.requests[pre.oom.rid].admitted_round
    assert admitted is not None and admitted < pre.oom.round
    for policy in ("fixed", "upstream", "drain"):
        assert sc.build_node(policy).run().oom is None, policy
