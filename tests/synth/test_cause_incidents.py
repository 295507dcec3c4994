"""Synthesized incidents, one per cause: rendered as logs, replayed as a user would."""

from __future__ import annotations

import pytest

from kvforensics.causes import IDS
from kvforensics.replay import ReplayOptions, replay_logs
from kvforensics.synth.incidents import INCIDENTS

POLICIES = ["fixed", "upstream", "drain", "park"]

#: (sizes of the node, outside allocation): other page, align and chunk sizes than the
#: default, so that nothing holds only for one set of numbers
VARIANTS = {
    "default": {},
    "page16-align128": {
        "page": 16,
        "align": 128,
        "chunk": 2048,
        "free": 40000,
        "victim_len": 30001,
        "first": 512,
        "taken": 30720,
        "at_round": 2,
    },
    # no checkpoint alignment: an AttentionStore write leaves a silent round's end open
    # to within a block; PP3's #new-token closes it
    "page64-noalign": {
        "page": 64,
        "align": 0,
        "chunk": 2048,
        "free": 40960,
        "victim_len": 30727,
        "first": 512,
        "taken": 20544,
        "at_round": 2,
    },
    "page32-align512": {
        "page": 32,
        "align": 512,
        "chunk": 8192,
        "free": 120000,
        "victim_len": 90000,
        "first": 3072,
        "taken": 70016,
        "at_round": 4,
    },
}


#: the other incidents at other sizes: a second page size, align and chunk each, and
#: pools that are not whole pages where the cause needs it
OTHER_SIZES = {
    "hybrid_pool": {
        "page16-align128": {"page": 16, "align": 128, "chunk": 2048, "free": 20000,
                            "swa_short": 12000, "seq": 15000, "other": 300},
        "page32-align512": {"page": 32, "align": 512, "chunk": 8192, "free": 60000,
                            "swa_short": 30000, "seq": 50000, "other": 5000},
    },
    "page_granularity": {
        "page16": {"page": 16, "free": 12008},
        "page128-align512": {"page": 128, "align": 512, "free": 12000},
    },
    # a chunk that is not a multiple of the align leaves budget after an aligned piece:
    # less after the first truncation (behind as-a) than after the resumed one
    "late_gap": {
        "default": {},
        "page16-align128": {"page": 16, "align": 128, "chunk": 2144, "first": 544,
                            "compute": 80, "seq": 6000, "host": 3000, "free": 8000},
        "page128-align512": {"page": 128, "align": 512, "chunk": 8576, "first": 2176,
                             "compute": 300, "seq": 24000, "host": 12000, "free": 32000},
    },
}  # fmt: skip
#: the same sizes with an intruder that arrives after the victim's first truncation
OTHER_SIZES["late_arrival"] = OTHER_SIZES["late_gap"]
#: page granularity alone (SGLang 0.5.9's and 0.5.10's SWA allocator): in each the long
#: request's pieces leave ``chunk % align`` tokens of chunk budget, ``prefill`` refuses the
#: short request until the last round, whose pieces fit the free slots in whole pages
OTHER_SIZES["swa_page_estimate"] = {
    "default": {},
    "one-piece": {"other": 0, "free": 12032},
    "sglang-0.5.10": {"release": "sglang-0.5.10"},
    "page16-align128": {"page": 16, "align": 128, "chunk": 2064, "prefill": 2096,
                        "seq": 5096, "other": 40, "free": 5152},
    "page128-align512": {"page": 128, "align": 512, "chunk": 8320, "prefill": 8448,
                         "seq": 21384, "other": 200, "free": 21760},
}  # fmt: skip
SIZES = {"external_allocation": VARIANTS, **OTHER_SIZES}

CASES = [
    (name, variant)
    for name in sorted(INCIDENTS)
    for variant in (sorted(SIZES[name]) if name in SIZES else [None])
]


def _replayed(tmp_path_factory, name, variant):
    inc = INCIDENTS[name](**(SIZES[name][variant] if variant else {}))
    paths = inc.write(tmp_path_factory.mktemp(f"{name}-{variant}"))
    return inc, replay_logs(paths, ReplayOptions(POLICIES, profile=inc.profile))


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{c[1] or 'default'}")
def incident(request, tmp_path_factory):
    return _replayed(tmp_path_factory, *request.param)


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def external(request, tmp_path_factory):
    return _replayed(tmp_path_factory, "external_allocation", request.param)


def test_each_incident_holds_its_causes_and_no_other(incident):
    inc, rr = incident
    held = {c.id: c.held for c in rr.causes}
    assert held == {cid: cid in inc.holds for cid in IDS}
    rebuilt = [(p.start, p.end) for r in rr.rebuild.rounds for p in r.pieces if p.rid == inc.victim]
    assert rebuilt == inc.pieces(inc.victim)
    assert rr.rebuild.contradictions == [] and rr.fidelity.mismatches == ()
    assert rr.reproduced is True
    for name in POLICIES:
        assert (rr.results[name].oom is None) == (name in inc.avoided_by), name


def test_pieces_rebuilt_exactly_as_they_ran(external):
    inc, rr = external
    rebuilt = [(p.start, p.end) for r in rr.rebuild.rounds for p in r.pieces if p.rid == inc.victim]
    assert rebuilt == inc.pieces(inc.victim)
    cap = inc.run()
    assert rr.observed_oom.round == cap.oom.round
    assert rr.observed_oom.rid == inc.victim


def test_no_impossible_baseline_and_no_contradiction(external):
    _, rr = external
    pool = rr.rebuild.cfg.pool_size
    for r in rr.rebuild.rounds:
        for v in (r.baseline, r.baseline_end):
            assert v is None or 0 <= v.value <= pool
    assert rr.rebuild.contradictions == []
    assert rr.fidelity.mismatches == ()


def test_external_allocation_and_forced_resume_hold_and_nothing_else(external):
    inc, rr = external
    held = {c.id: c.held for c in rr.causes}
    assert held == {cid: cid in inc.holds for cid in IDS}
    ext = rr.cause("external_allocation")
    (taken,) = inc.outside.values()
    assert abs(ext.figures.tokens - taken) < inc.cfg.page_size
    (at,) = inc.outside
    # the fall is placed no earlier than it happened, and where the evidence first needs it
    assert ext.figures.after_round < at <= ext.figures.before_round
    forced = rr.cause("forced_resume")
    start, end = forced.figures.piece
    chunk, align = inc.cfg.chunked_prefill_size, inc.cfg.align_size
    # rem_chunk_tokens taken, the end aligned down: a piece that is not the last
    assert forced.figures.rem_total_tokens <= 0
    assert end == ((start + chunk) // align * align if align else start + chunk)
    assert end < forced.figures.seq_len
    assert rr.as_dict()["root_cause"] is None


def test_policy_table_under_the_same_facts(external):
    inc, rr = external
    assert rr.reproduced is True
    for name in ["prefix", *POLICIES]:
        avoided = rr.results[name].oom is None
        assert avoided == (name in inc.avoided_by), name
    park = rr.results["park"]
    assert park.requests[inc.victim].finished_round is not None


@pytest.fixture(scope="module", params=sorted(OTHER_SIZES["hybrid_pool"]))
def hybrid(request, tmp_path_factory):
    return _replayed(tmp_path_factory, "hybrid_pool", request.param)


def test_hybrid_pool_binds_on_the_swa_line_and_every_policy_runs_out(hybrid):
    inc, rr = hybrid
    cap = inc.run()
    swa_total = inc.cfg.swa_pool_size - inc.cfg.pool_size + cap.oom.available
    # the message's own lines: the full pool would fit, the SWA pool does not
    assert cap.oom.tokens <= cap.oom.available
    assert f"Available swa tokens: {swa_total} " in cap.oom.message
    assert swa_total < cap.oom.tokens
    assert rr.observed_oom.round == cap.oom.round and rr.reproduced is True
    assert rr.observed_oom.swa_available == swa_total  # the headline shows the SWA line
    cause = rr.cause("hybrid_pool")
    assert cause.held is True and cause.figures.pool == "swa"
    assert (cause.figures.requested, cause.figures.free) == (cap.oom.tokens, swa_total)
    # the SWA pool's size is inferred from the crash, as the run had it, and said so
    assert any(f"SWA pool of {inc.cfg.swa_pool_size} slots" in a for a in rr.assumptions)
    # the memory was there in the full pool: nothing forced, nothing taken outside
    assert rr.cause("forced_resume").figures.rem_total_tokens > 0
    assert rr.drops == ()
    for name in POLICIES:
        got = rr.results[name].oom
        assert (got.round, got.rid, got.tokens) == (cap.oom.round, inc.victim, cap.oom.tokens)


@pytest.fixture(scope="module", params=sorted(OTHER_SIZES["late_gap"]))
def late(request, tmp_path_factory):
    return _replayed(tmp_path_factory, "late_gap", request.param)


def test_the_gap_that_mattered_is_not_the_victims_first_truncation(late):
    inc, rr = late
    steps = [s for rc in inc.run().rounds for s in rc.steps]
    # as it ran: the first truncation left chunk budget, too little for the intruder's
    # pages (refused as a second chunked request); the resumed piece's gap let it in
    first = next(s for s in steps if s.rid == inc.victim and s.decision == "truncated")
    refused = next(s for s in steps if s.rid == "as-c")
    assert (refused.round, refused.decision) == (first.round, "rejected")
    assert 0 < first.rem_chunk_after < inc.cfg.ceil_page(refused.seq_len - refused.host_hit)
    admitted = next(s for s in steps if s.rid == "as-c" and s.decision == "full")
    tail = rr.cause("unreserved_tail")
    assert tail.held is True
    f = tail.figures
    assert (f.round, f.intruder_rid, f.victim_rid) == (
        admitted.round, "as-c", inc.victim,
    )  # fmt: skip
    gap = next(s for s in steps if s.round == admitted.round and s.rid == inc.victim)
    assert gap.decision == "resumed"
    assert f.victim_piece == (gap.start, gap.end)
    assert f.leftover_chunk_budget == gap.rem_chunk_after == (
        inc.cfg.chunked_prefill_size % inc.cfg.align_size
    )
    assert (f.intruder_load_back, f.intruder_need) == (admitted.load_back, admitted.need)
    # both truncations are named in the evidence, the first one first
    looked = tail.evidence[1]
    assert looked.index(f"round {first.round} {inc.victim} [0, ") < looked.index(
        f"round {gap.round} {inc.victim} [{gap.start}, "
    )
    assert rr.as_dict()["root_cause"] == f.as_dict()


@pytest.fixture(scope="module", params=sorted(OTHER_SIZES["late_arrival"]))
def arrival(request, tmp_path_factory):
    return _replayed(tmp_path_factory, "late_arrival", request.param)


def test_a_request_that_arrives_after_the_start_round_is_replayed_under_every_policy(arrival):
    inc, rr = arrival
    cap = inc.run()
    shown = {}  # rid -> the first round whose adder lines show it
    for rc in cap.rounds:
        for s in rc.steps:
            shown.setdefault(s.rid, rc.round)
    # the forward run starts where the victim was first truncated, before the intruder
    assert rr.start_round == shown[inc.victim] < shown["as-c"]
    start = next(r for r in rr.rebuild.rounds if r.index == rr.start_round)
    assert "as-c" not in {d.rid for d in start.decisions}
    # under prefix the run is the one that happened, out-of-memory included
    ran = [(rc.round, rc.pieces) for rc in cap.rounds]
    prefix = rr.results["prefix"]
    assert [(r.round, r.pieces) for r in prefix.rounds] == ran
    assert (prefix.oom.round, prefix.oom.rid, prefix.oom.tokens) == (
        cap.oom.round, inc.victim, cap.oom.tokens,
    )  # fmt: skip
    tail = rr.cause("unreserved_tail")
    assert tail.held is True
    assert (tail.figures.intruder_rid, tail.figures.round) == ("as-c", shown["as-c"])
    # every policy meets the same arrival, never before the log shows it, and the fixes
    # run it after the victim instead of through the gap
    for name in POLICIES:
        res = rr.results[name]
        assert res.oom is None, name
        first = res.requests["as-c"].pieces[0][0]
        assert first >= shown["as-c"], name
        assert res.requests["as-c"].finished_round > res.requests[inc.victim].finished_round
    assert any("first shown after round" in a and "as an arrival under every policy" in a
               for a in rr.assumptions)  # fmt: skip


@pytest.fixture(scope="module", params=sorted(OTHER_SIZES["swa_page_estimate"]))
def estimate(request, tmp_path_factory):
    name = "swa_page_estimate"
    inc = INCIDENTS[name](**OTHER_SIZES[name][request.param])
    paths = inc.write(tmp_path_factory.mktemp(f"{name}-{request.param}"))
    return inc, paths, replay_logs(paths, ReplayOptions(POLICIES, profile=inc.profile))


def test_page_granularity_alone_the_tokens_and_the_pages_fit_the_estimate_does_not(estimate):
    inc, _, rr = estimate
    cap, page = inc.run(), inc.cfg.page_size
    oom = cap.oom
    assert (rr.observed_oom.round, rr.observed_oom.rid) == (oom.round, inc.victim)
    assert rr.observed_oom.swa_available == oom.available  # both pools' lines
    cause = rr.cause("page_granularity")
    f = cause.figures
    pieces = tuple(tuple(p) for p in cap.oom_round.pieces)
    ask = f.ask
    assert ask.pieces == pieces and ask.profile == inc.profile and ask.page_per_request
    tokens = sum(e - s for _, s, e in pieces)
    pages = sum(inc.cfg.pages_for(s, e) for _, s, e in pieces)
    # in tokens and in whole pages the batch fits what is free; a page per piece does not
    assert (f.pool.requested, f.pool.free) == (tokens, oom.available)
    assert tokens <= ask.pages_needed == pages <= f.pool.free < ask.allocator_asks
    assert ask.allocator_asks == tokens + page * len(pieces)
    assert f.free_pages == oom.available // page
    assert any(str(ask.allocator_asks) in e for e in cause.evidence)
    # nothing forced: the memory check passed with memory left
    assert rr.cause("forced_resume").held is False and rr.drops == ()


def test_the_same_logs_under_the_fork_say_no_known_cause(estimate):
    _, paths, _ = estimate
    rr = replay_logs(paths, ReplayOptions(POLICIES))  # the fork's adder lines: the fork profile
    assert rr.profile.profile.name == "fork" and rr.reproduced is False
    cause = rr.cause("page_granularity")
    assert cause.held is False and "would have fit" in cause.summary
    f = cause.figures
    assert f.ask.allocator_asks == f.ask.pages_needed <= f.pool.free
