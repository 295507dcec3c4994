"""The replay's counterfactual answers held to worlds whose truth under every policy is
known: drawn by the independent simulator in tests/ground (it imports nothing of
kvforensics), written out as the fork's logs, replayed, and compared."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvforensics.replay import ReplayOptions, replay_logs
from tests.ground.draw import play
from tests.ground.render import write_logs

FIXES = ["fixed", "upstream", "drain", "park"]


def _replayed(p, out: Path):
    paths = write_logs(p.world, out, with_ms=p.meta.with_ms)
    return replay_logs(paths, ReplayOptions(FIXES))


def _oom(o) -> tuple | None:
    return None if o is None else (o.round, o.rid, o.tokens, o.available)


def test_an_outside_allocation_then_a_forced_piece(tmp_path):
    """Memory taken outside the adder between logged rounds shrinks the victim's pieces;
    then add_chunked_req forces a 16256-token piece with nothing available. The forward
    run under prefix reproduces that very out-of-memory, fixed does not avoid it (the
    memory is gone whatever the adder reserves), park does (it waits)."""
    p = play(42, setting=2, outside=True, fast=False)
    # the world as drawn (the test's premise, from the simulator alone)
    assert (p.world.oom.tokens, p.world.oom.available) == (16256, 0)
    assert p.cause == "external_allocation" and p.forced_resume
    assert p.policies["fixed"].oom is not None and p.policies["park"].oom is None

    rr = _replayed(p, tmp_path)
    assert rr.reproduced
    assert _oom(rr.results["prefix"].oom) == _oom(p.world.oom)
    assert rr.holds["fixed"].answer == "out of memory"
    assert rr.holds["park"].answer == "no out of memory"
    held = {c.id for c in rr.causes if c.held}
    assert {"external_allocation", "forced_resume"} <= held
    takes = [s for s in rr.anchoring.shifts if s.tokens > 0]
    assert takes, "the outside allocation is an event the observations require"


def _agrees(rr, p, policy: str) -> bool:
    """The replay's answer is the world's, or it says plainly that it depends."""
    h = rr.holds[policy]
    return h.answer == "depends" or (h.answer == "out of memory") == (
        p.policies[policy].oom is not None
    )


def _unseen_takes(p) -> list[int]:
    """The world's takes outside the adder that got nothing under prefix inside the
    victim's life (no line shows them): the slots each asked for."""
    asked = p.meta.outside.tokens if p.meta.outside is not None else 0
    crash = p.world.oom.round
    return [asked for tk in p.world.taken if not tk.tokens and p.start_round < tk.round_after <= crash]


def _agrees_or_names_the_take(rr, p, policy: str) -> bool:
    """As ``_agrees``; or the world crashed only through a take the logs could not show,
    and the replay named a size of such a take that undoes its answer, which the world's
    take reached."""
    if _agrees(rr, p, policy):
        return True
    u = rr.holds[policy].unseen
    takes = _unseen_takes(p)
    return u is not None and u.least_slots is not None and any(t >= u.least_slots for t in takes)


@pytest.mark.slow
@pytest.mark.parametrize(
    "seed, setting, outside, fast",
    [(7, 0, False, True), (8, 1, True, False), (9, 2, False, False), (10, 3, True, True),
     (11, 4, False, False), (12, 0, True, False)],
)  # fmt: skip
def test_worlds_at_every_setting(tmp_path, seed, setting, outside, fast):
    """Worlds at other page/align/chunk settings, with and without outside allocations,
    fast and slow transfers: prefix reproduces the logged crash exactly, each fix's answer
    is the world's (or marked as depending on the unobserved), the cause is the world's."""
    p = play(seed, setting=setting, outside=outside, fast=fast)
    rr = _replayed(p, tmp_path)
    assert _oom(rr.results["prefix"].oom) == _oom(p.world.oom)
    if "outside_unseen" in p.tags:
        # The outside allocation took nothing in the world the logs come from (the pool
        # was already empty): no line shows it, and the replay invents no event for it.
        assert not any(s.tokens > 0 for s in rr.anchoring.shifts)
    for policy in FIXES:
        assert _agrees_or_names_the_take(rr, p, policy), (policy, rr.holds[policy].sentence())
    held = {c.id for c in rr.causes if c.held}
    assert p.cause in held
    if p.cause == "unreserved_tail":
        assert "external_allocation" not in held


@pytest.mark.slow
@pytest.mark.parametrize(
    "seed, setting, outside, fast, what",
    [
        (5068, 67, False, True, "a forced-size silent piece cut short: memory came back"),
        (5026, 25, False, True, "a refused first check's lock after a resumed chunk"),
        (5241, 240, False, False, "a logged baseline printed after its request's lock"),
        (5032, 31, False, True, "a lock the logs show that the run cannot hold"),
        (5136, 135, False, True, "two walk steps of the crash's size"),
        (5289, 288, False, False, "in-block steps before memory came back, shown by PP3"),
        (7410, 409, False, True, "a lock the walk before it measures, then a last piece"),
        (5498, 497, True, True, "an outside allocation the crash's tree dump places"),
        (23245, 244, False, False, "whole-second stamps: a PP3 line two rounds on, same size"),
        (23150, 149, True, True, "a silent round its seated PP3 line sizes (memory fell)"),
        (23259, 258, False, False, "silent rounds seated on PP3 lines, refused locks"),
        (23253, 252, False, False, "the run out of memory in a round the logs show ran"),
        (23030, 29, True, True, "the window without transfer ends, a round early"),
        (31345, 344, True, False, "a last piece's write leaves its end open; PP3 pins it"),
        (31400, 399, False, True, "a waiting request's whole prefix evicted, not a part"),
        (41395, 394, False, False, "a fall its first check's own prefix lock explains"),
        (51449, 448, False, False, "two silent rounds PP3 prints before the pinned one"),
        (51240, 239, True, True, "a fall a request admitted the round before locked"),
        (61450, 449, True, True, "a refused prefix the logs show evicted by a take"),
    ],
)  # fmt: skip
def test_worlds_the_rebuild_once_misread(tmp_path, seed, setting, outside, fast, what):
    """Worlds whose logs the rebuild once read wrong (a round too many or too few, a
    baseline outside the pool, an outside allocation where memory had come back): the
    crash is read and reproduced exactly, no contradiction is listed, the cause and every
    fix's answer are the world's."""
    p = play(seed, setting=setting, outside=outside, fast=fast)
    rr = _replayed(p, tmp_path)
    assert _oom(rr.rebuild.oom) == _oom(p.world.oom), what
    assert _oom(rr.results["prefix"].oom) == _oom(p.world.oom), what
    assert not rr.rebuild.contradictions, (what, rr.rebuild.contradictions)
    held = {c.id for c in rr.causes if c.held}
    # an outside allocation may come on top of an unreserved tail; memory taken outside
    # is never claimed where nothing was
    assert p.cause in held, (what, held)
    if p.cause == "unreserved_tail":
        assert "external_allocation" not in held, (what, held)
    for policy in FIXES:
        assert _agrees(rr, p, policy), (what, policy, rr.holds[policy].sentence())


@pytest.mark.slow
def test_a_take_the_logs_could_not_show(tmp_path):
    """Memory asked for outside the adder just before the crash round, when the pool had
    nothing free: under prefix it got nothing, so no line shows it; under fixed, upstream
    and drain it gets what they left free, and each crashes. The replay cannot see it, so
    it says how large such a take would have to be to undo each "avoids it", and the
    world's take was that large."""
    p = play(17003, setting=2, outside=True, fast=False)
    assert "outside_unseen" in p.tags and _unseen_takes(p), "the world's premise"
    crashed = [q for q in FIXES if p.policies[q].oom is not None]
    assert crashed == ["fixed", "upstream", "drain"], "the world's premise"
    rr = _replayed(p, tmp_path)
    assert _oom(rr.results["prefix"].oom) == _oom(p.world.oom)
    assert not any(s.tokens > 0 for s in rr.anchoring.shifts), "no event invented"
    for policy in crashed:
        h = rr.holds[policy]
        assert h.answer == "no out of memory" and h.unseen is not None
        assert h.unseen.blind == (p.world.oom.round,)
        assert h.unseen.least_slots is not None
        assert h.unseen.least_slots <= max(_unseen_takes(p))
        assert f"{h.unseen.least_slots} slots or more" in h.sentence()
    # park waits for memory: no take undoes it, and its sentence says nothing of one
    assert rr.holds["park"].unseen is not None and rr.holds["park"].unseen.least_slots is None
    assert "outside the adder" not in rr.holds["park"].sentence()


@pytest.mark.slow
def test_a_take_the_logs_could_not_show_falls_a_round_earlier_under_the_fixes(tmp_path):
    """As above, in the crash round itself: under the fixes the take's time falls in the
    round before (their rounds ran otherwise), and they crash there. The replay names the
    least such take, before that round, and the world's was as large."""
    p = play(41099, setting=98, outside=True, fast=False)
    assert "outside_unseen" in p.tags and _unseen_takes(p), "the world's premise"
    crashed = [q for q in FIXES if p.policies[q].oom is not None]
    assert crashed, "the world's premise"
    rr = _replayed(p, tmp_path)
    assert _oom(rr.results["prefix"].oom) == _oom(p.world.oom)
    for policy in crashed:
        u = rr.holds[policy].unseen
        assert _agrees_or_names_the_take(rr, p, policy), (policy, rr.holds[policy].sentence())
        assert u is not None and u.at == p.world.oom.round
        assert f"{u.least_slots} slots or more before round {u.before_round}" in rr.holds[policy].sentence()


@pytest.mark.slow
def test_more_back_and_a_take_the_empty_crash_line_hides(tmp_path):
    """Whole-second stamps; the KV in transfer at the start round came back at once, and
    something outside the adder took part of it just before the crash round, leaving 0.
    The logs are met as well by less coming back and no take, which the point estimate
    holds; so every fix's "avoids it" must say it depends on that, and the case with more
    back and the take runs out as the world did."""
    p = play(71450, setting=449, outside=True, fast=True)
    assert p.cause == "external_allocation" and p.world.oom.available == 0, "the world's premise"
    crashed = [q for q in FIXES if p.policies[q].oom is not None]
    assert crashed == ["fixed", "upstream", "drain"], "the world's premise"
    rr = _replayed(p, tmp_path)
    assert _oom(rr.results["prefix"].oom) == _oom(p.world.oom)
    assert rr.anchoring.can_swap()
    for policy in crashed:
        h = rr.holds[policy]
        assert h.answer == "depends", (policy, h.sentence())
        assert any(c.swap and c.oom for c in h.cases), policy
        assert "no more memory came back from KV transfers" in h.sentence()
