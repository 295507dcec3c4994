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


def _ceil(n: int, page: int) -> int:
    return -(-n // page) * page


def _check_step(r, prev, cfg, policy: str) -> None:
    """One adder record against the rules written out here, apart from the model."""
    page, first = cfg.page_size, prev is None
    # The books carry over from the step before (a fresh budget starts every round).
    assert r.total_offset_before == (0 if first else prev.total_offset_after)
    assert r.cur_offset_before == (0 if first else prev.cur_offset_after)
    assert r.rem_chunk_tokens == (cfg.chunked_prefill_size if first else prev.rem_chunk_after)
    if r.decision == "rejected":
        assert (r.total_offset_after, r.cur_offset_after) == (
            r.total_offset_before,
            r.cur_offset_before,
        )
    else:
        paged = _ceil(r.end - r.start, page)
        last = r.end == r.seq_len
        # drain ends the round after a truncation: no chunk budget is left
        spent = r.rem_chunk_tokens if policy == "drain" and not last else paged
        assert r.rem_chunk_tokens - r.rem_chunk_after == spent
        assert r.cur_offset_after - r.cur_offset_before == paged + page
        later = (cfg.max_new_tokens if last else 0) + r.reserved_tail
        assert r.total_offset_after - r.total_offset_before == paged + page + later
        expect_reserved = _ceil(r.seq_len - r.end, page) + cfg.max_new_tokens
        assert r.reserved_tail == (expect_reserved if policy == "fixed" and not last else 0)
        # A non-last piece ends on the alignment unless that would reach its start.
        align = 0 if policy == "upstream" else cfg.align_size
        if not last and align and r.unaligned_end // align * align > r.start:
            assert r.end == r.unaligned_end // align * align
        else:
            assert r.end == r.unaligned_end
    if r.call == "add_one_req":
        assert r.need == r.seq_len - r.device_prefix + cfg.max_new_tokens + page
        assert (r.budget_state == "NO_TOKEN" and r.decision == "rejected") or (
            r.need < r.baseline - r.total_offset_before
        )
    else:
        assert r.forced == (min(r.rem_chunk_tokens, r.rem_total_tokens) <= 0)


@SETTINGS
@given(scenarios(), st.sampled_from(["prefix", "fixed", "upstream", "drain"]))
def test_step_records_follow_the_rules(data, policy):
    node, _ = run_checked(data, policy)
    prev = None
    for r in node.ledger.rows:
        if r.call == "allocate":
            continue
        prev = None if prev is None or prev.round != r.round else prev
        _check_step(r, prev, node.cfg, policy)
        prev = r
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
