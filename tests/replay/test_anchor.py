"""The forward runs held to the evidence: an assumption about the unobserved never changes
what the observations say."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvforensics.model import Config
from kvforensics.replay import ReplayOptions, replay_logs
from kvforensics.replay.anchor import Anchor, Anchoring, Shift
from kvforensics.replay.holds import holds_for, tried_seconds

INC = Path(__file__).resolve().parents[2] / "fixtures" / "logs" / "incident"
FIXES = ["fixed", "upstream", "drain", "park"]


@pytest.fixture(scope="module")
def by_seconds():
    logs = [INC / "pp0.log", INC / "pp3.log"]
    seconds = (None, 0.5, 2.0, 9.0)
    return {s: replay_logs(logs, ReplayOptions(FIXES, transfer_seconds=s)) for s in seconds}


def _held(rr) -> set[str]:
    return {c.id for c in rr.causes if c.held}


def test_a_transfer_time_changes_no_cause(by_seconds):
    """--transfer-seconds 2 once made every run finish and the verdict find no cause; the
    crash and its causes are read from the logs, whatever transfer time is given."""
    base = by_seconds[None]
    assert base.reproduced and _held(base) == {"unreserved_tail"}
    for s, rr in by_seconds.items():
        assert rr.reproduced, s
        assert _held(rr) == _held(base), s
        assert rr.results["prefix"].oom.tokens == 2056


def test_an_assumption_the_evidence_contradicts_is_said(by_seconds):
    """2 s would free memory before the out-of-memory round, where the logs show 0."""
    said = [a for a in by_seconds[2.0].assumptions if a.startswith("contradicted by the evidence")]
    assert len(said) == 1
    assert "KV transfers of 2.00 s (given)" in said[0] and "0 available" in said[0]
    assert not any(a.startswith("contradicted") for a in by_seconds[None].assumptions)


def test_every_fix_avoids_the_incident_over_every_time_tried(by_seconds):
    rr = by_seconds[None]
    for policy in FIXES:
        h = rr.holds[policy]
        assert h.answer == "no out of memory", (policy, h.sentence())
        assert len({c.seconds for c in h.cases}) >= 3
        # never below the log's lower bound: no transfer ended in the rounds before the
        # crash (4 s by the printed times, less a second: the stamps are whole seconds)
        assert min(c.seconds for c in h.cases) == 3.0
    assert rr.holds["prefix"].answer == "out of memory"
    d = rr.as_dict()["policies"]["fixed"]["holds_for"]
    assert d["answer"] == "no out of memory" and d["says"].startswith("avoids it for every")


def test_a_depending_answer_names_the_threshold():
    seconds = [1.0, 2.0, 4.0, 8.0]
    h = holds_for("fixed", lambda s, _p, _m, _o, _h, _w: s < 3.0, seconds, [(0, False, 0, 0, False)], (1.0, None))
    assert h.answer == "depends"
    assert h.sentence() == (
        "depends on the unobserved: avoids it only if transfers take at least 4.00 s "
        "(runs out at 2.00 s)"
    )
    assert tried_seconds(2.5, {"a": 1.0, "b": 3.0}, None) == [1.0, 2.5, 3.0, 6.0, 12.0]
    assert tried_seconds(2.5, {"a": 1.0}, 2.0)[0] == 2.0  # nothing below the log's bound
    # a bound that is no whole hundredth is tried rounded up, not dropped
    assert tried_seconds(4.0, {"a": 2.0}, 0.3842)[0] == 0.39


def test_a_take_that_left_nothing_is_a_lower_bound():
    """A take the out-of-memory line shows leaving 0 available may have wanted more: the
    schedule's ``most`` raises it; a take short of 0, or a piece-bound one, stays."""
    oom = Anchor(12, "oom", 0, "pp0.log:9", 2056, "as-v")
    part = Anchor(11, "oom", 64, "pp0.log:8", 2056, "as-v")
    full = Shift(12, 512, 10, oom, ((12, 512), (11, 576)))
    some = Shift(11, 128, 10, part, ((11, 128),))
    found = Anchoring((full, some), (), 12)
    assert full.saturated and not some.saturated and found.saturated()
    assert found.schedule({}) == {12: 512, 11: 128}
    assert found.schedule({}, -1) == {11: 576 + 128}
    assert found.schedule({}, 0, most=10_000) == {12: 10_000, 11: 128}


def test_a_given_back_event_frees_only_what_is_in_transfer():
    """Memory the logs show coming back can only be KV in transfer: never more."""
    from kvforensics.model import Inflight, NodeState, Request, get_policy, start_node

    cfg = Config(page_size=64, chunked_prefill_size=4096, max_prefill_tokens=4096,
                 pool_size=8192, align_size=0)  # fmt: skip
    state = NodeState(free=1024, held=(("t1", 2048),), inflight=(Inflight("t1", 99.0),),
                      waiting=(Request("r", 640, 0, 0),))  # fmt: skip
    node = start_node(cfg, get_policy("prefix"), state, outside={0: -4096})
    node.prepare()
    assert node.pool.baseline() == 1024 + 2048
    node.pool.check()


def test_an_event_a_round_either_side_is_a_case_of_its_own():
    """An event found between observations happened at a time; under another policy that
    time may fall in another round. The schedule moves every event by the offset (never
    to or before the round it was found after), and an answer that turns with it says so."""
    oom = Anchor(12, "oom", 0, "pp0.log:9", 2056, "as-v")
    take = Shift(12, 512, 10, oom, ((12, 512), (11, 512)))
    found = Anchoring((take,), (), 12)
    assert found.schedule({}, 0, 0, 1) == {13: 512}
    assert found.schedule({}, -1, 0, -1) == {11: 512}  # round 11 is the earliest after 10
    assert found.schedule({}, 0, 0, -1) == {11: 512}
    picks = [(0, False, 0, 0, False), (0, False, -1, 0, False), (0, False, 1, 0, False)]
    h = holds_for("drain", lambda _s, _p, _m, o, _h, _w: o > 0, [2.0], picks, (1.0, None))
    assert h.answer == "depends"
    assert "which round, under this policy, the events" in h.sentence()
    d = h.as_dict()["cases"]
    assert [c.get("round_offset", 0) for c in d] == [0, -1, 1]


def test_an_answer_names_only_the_unknowns_that_decide_it():
    """The logged crash's time bounds the transfers still running then; under another
    policy that time may fall a round earlier or later. An answer that turns on it and on
    the transfer time names both, and nothing that all its cases merely share."""
    picks = [(0, False, 0, 0, False), (0, False, -1, 0, False), (0, False, 1, 0, False),
             (0, False, 0, -1, False), (0, False, 0, 1, False)]  # fmt: skip
    h = holds_for("drain", lambda s, _p, _m, _o, hold, _w: not (hold < 0 and s <= 1.0),
                  [1.0, 2.0, 4.0], picks, (1.0, None))  # fmt: skip
    assert h.answer == "depends"
    assert h.sentence() == (
        "depends on the unobserved: avoids it only if transfers take at most 1.00 s and the "
        "KV transfers the logs show running at the crash end a round earlier under it (the "
        "logs bound their end by a time, not a round)"
    )
    assert [c.get("hold_offset", 0) for c in h.as_dict()["cases"]][:5] == [0, 0, 0, -1, 1]
    every = holds_for("park", lambda *_: False, [1.0, 2.0], picks, (1.0, None))
    assert every.sentence().endswith("and the transfers the logs hold back ending a round earlier or later")


def test_more_back_and_the_difference_taken_before_the_crash_is_a_case_of_its_own():
    """A return the logs bound only from below (a piece the chunk budget caps took no more
    with more memory) and an out-of-memory line with 0 available: more may have come back,
    and something outside the adder taken the difference just before the crash round,
    which that 0 hides. The swapped schedule moves the return to its most and adds that
    take; an answer that turns on it says so."""
    piece = Anchor(11, "piece", 0, "round 11: ...")
    back = Shift(11, -1024, 10, piece, ((11, -1024),), most_back=-4096)
    found = Anchoring((back,), (), 12, empty_oom=12)
    assert found.can_swap()
    assert found.schedule({}) == {11: -1024}
    assert found.schedule({}, swap=True) == {11: -4096, 12: 3072}
    # no out-of-memory line showing 0 available: nothing hides a take, no swap
    assert not Anchoring((back,), (), 12).can_swap()
    picks = [(0, False, 0, 0, False), (0, False, 0, 0, True)]
    h = holds_for("fixed", lambda _s, _p, _m, _o, _h, w: w, [2.0], picks, (1.0, None))
    assert h.answer == "depends"
    assert h.sentence().startswith(
        "depends on the unobserved: avoids it only if no more memory came back from KV "
        "transfers than the logs require"
    )
    assert [c.get("more_back_and_taken", False) for c in h.as_dict()["cases"]] == [False, True]
