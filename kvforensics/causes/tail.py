"""``unreserved_tail``: a truncation left chunk budget, the truncated request's tail was
promised to nobody, and a request cheap in compute but large in memory came through the
gap (the 2026-11-02 incident)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvforensics.causes.cause import Cause
from kvforensics.causes.gaps import entered_after
from kvforensics.model.decisions import ADDER_CALLS, CHUNKED, Decision
from kvforensics.model.ledger import Step
from kvforensics.model.policies import AS_RAN, FIX

if TYPE_CHECKING:
    from kvforensics.causes.replayed import Replayed
    from kvforensics.model import RunResult

#: the policy that is the code as it ran, and the fix the root cause is weighed against


@dataclass(frozen=True, slots=True, kw_only=True)
class RootCause:
    """The truncation whose tail nobody reserved and the request through its gap (the
    ``intruder_*`` fields are None when none came through)."""

    victim_rid: str
    victim_seq_len: int
    unreserved_tail: int
    victim_piece: tuple[int, int]
    unaligned_piece: int
    aligned_piece: int
    align_size: int
    leftover_chunk_budget: int | None
    intruder_rid: str | None
    intruder_compute: int | None
    #: the chunk budget it spent: its piece in whole pages
    intruder_compute_paged: int | None
    intruder_load_back: int | None
    intruder_rem_total_tokens: int | None
    intruder_need: int | None
    round: int
    round_time: str | None

    def as_dict(self) -> dict[str, object]:
        return {
            "victim_rid": self.victim_rid,
            "victim_seq_len": self.victim_seq_len,
            "unreserved_tail": self.unreserved_tail,
            "victim_piece": list(self.victim_piece),
            "unaligned_piece": self.unaligned_piece,
            "aligned_piece": self.aligned_piece,
            "align_size": self.align_size,
            "leftover_chunk_budget": self.leftover_chunk_budget,
            "intruder_rid": self.intruder_rid,
            "intruder_compute": self.intruder_compute,
            "intruder_compute_paged": self.intruder_compute_paged,
            "intruder_load_back": self.intruder_load_back,
            "intruder_rem_total_tokens": self.intruder_rem_total_tokens,
            "intruder_need": self.intruder_need,
            "round": self.round,
            "round_time": self.round_time,
        }


def root_cause(rr: Replayed) -> RootCause | None:
    """From the ``prefix`` ledger: the truncation whose tail was not reserved and the
    request admitted through its gap that ``fixed`` refuses.

    Every truncation up to the out-of-memory is a candidate (a piece that is not its
    request's last, from ``add_one_req`` or a resumed ``add_chunked_req``): the victim's
    first, then other requests' (their unreserved tails drew on the same pool), each in
    order of events. The first with an intruder is the gap that mattered; without one, the
    victim's first truncation that left chunk budget (else its first) says why not."""
    fix = rr.results.get(FIX)
    rows, steps = _truncations(rr)
    if not rows:
        return None
    victim = rows[0].rid
    for t in rows:
        if (t.rem_chunk_after or 0) > 0:
            intruder = _intruder(entered_after(steps, t), fix, t)
            if intruder is not None:
                return _figures(rr, t, intruder)
    mine = [t for t in rows if t.rid == victim]
    t = next((t for t in mine if (t.rem_chunk_after or 0) > 0), mine[0])
    return _figures(rr, t, None)


def held_root_cause(causes: Sequence[Cause]) -> RootCause | None:
    """The ``unreserved_tail`` figures, when that story holds."""
    tail = next((c for c in causes if c.id == "unreserved_tail"), None)
    if tail is None or not tail.held or not isinstance(tail.figures, RootCause):
        return None
    return tail.figures


def _truncations(rr: Replayed) -> tuple[list[Step], list[Step]]:
    """The ``prefix`` ledger's truncations up to its out-of-memory, the victim's first
    (none when the victim was never truncated), and the ledger's adder calls."""
    pre = rr.results.get(AS_RAN)
    if pre is None or pre.oom is None:
        return [], []
    victim, last = pre.oom.rid, pre.oom.round
    steps = [s for s in pre.ledger.rows if s.call in ADDER_CALLS]
    trunc = [
        s
        for s in steps
        if s.decision in CHUNKED
        and s.end is not None
        and s.seq_len is not None
        and s.end < s.seq_len
        and s.round is not None
        and s.round <= last
    ]
    # the victim's first, then the others, each in order of events (a stable sort)
    trunc.sort(key=lambda s: (s.rid != victim, s.round, s.step))
    if not trunc or trunc[0].rid != victim:
        return [], steps
    return trunc, steps


def _n(value: int | None) -> int:
    """A ledger number a truncation always has (its piece and length)."""
    if value is None:
        raise ValueError("a truncation's step lacks a number it always has")
    return value


def _figures(rr: Replayed, t: Step, i: Step | None) -> RootCause:
    """``root_cause``'s fields for truncation ``t`` and the request through its gap."""
    start, end, seq = _n(t.start), _n(t.end), _n(t.seq_len)
    rnd = _n(t.round)
    return RootCause(
        victim_rid=t.rid or "",
        victim_seq_len=seq,
        unreserved_tail=seq - end,
        victim_piece=(start, end),
        unaligned_piece=_n(t.unaligned_end) - start,
        aligned_piece=end - start,
        align_size=rr.rebuild.cfg.align_size,
        leftover_chunk_budget=t.rem_chunk_after,
        intruder_rid=i.rid if i else None,
        intruder_compute=_n(i.end) - _n(i.start) if i else None,
        intruder_compute_paged=_n(i.rem_chunk_tokens) - _n(i.rem_chunk_after) if i else None,
        intruder_load_back=i.load_back if i else None,
        intruder_rem_total_tokens=i.rem_total_tokens if i else None,
        intruder_need=i.need if i else None,
        round=rnd,
        round_time=_time_of(rr, rnd),
    )


def _intruder(after: list[Step], fix: RunResult | None, t: Step) -> Step | None:
    """The first request admitted after the truncation that ``fixed`` does not admit."""
    if fix is None or not after:
        return None
    fixed = [s for s in fix.ledger.rows if s.round == t.round]
    for row in after:
        f = next((s for s in fixed if s.rid == row.rid), None)
        if f is None or f.decision == Decision.REJECTED:
            return row
    return None


def _considered(rows: list[Step]) -> str:
    """Every truncation the detector looked at, in the order it looked."""
    seen = "; ".join(
        f"round {t.round} {t.rid} [{t.start}, {t.end}) {t.rem_chunk_after} chunk budget left"
        for t in rows
    )
    return f"truncations before the out-of-memory ({len(rows)}): {seen}"


def _time_of(rr: Replayed, index: int) -> str | None:
    rnd = rr.rebuild.round_at(index)
    return rnd.time.isoformat(sep=" ") if rnd is not None and rnd.time is not None else None


def story(rc: RootCause) -> list[str]:
    """The incident's chain in words."""
    when = f" ({rc.round_time})" if rc.round_time else ""
    start, end = rc.victim_piece
    lines = [
        f"{rc.victim_rid} ({rc.victim_seq_len} tokens) was truncated in round {rc.round}"
        f"{when} to [{start}, {end}): the "
        f"{rc.align_size}-token checkpoint alignment cut its piece from "
        f"{rc.unaligned_piece} to {rc.aligned_piece}, leaving "
        f"{rc.leftover_chunk_budget} tokens of chunk budget.",
        f"Its tail of {rc.unreserved_tail} tokens was not charged to rem_total_token_offset.",
    ]
    if rc.intruder_rid:
        lines.append(
            f"{rc.intruder_rid} came through the gap: it computes {rc.intruder_compute} "
            f"tokens ({rc.intruder_compute_paged} paged, within the "
            f"{rc.leftover_chunk_budget} left) but loaded back {rc.intruder_load_back} "
            f"tokens at admission; its memory check ({rc.intruder_need} < "
            f"{rc.intruder_rem_total_tokens}) passed only because the tail was not reserved."
        )
        lines.append(
            "Three conditions held together: (1) chunk budget left after a truncation "
            "(alignment), (2) the truncated request's tail not reserved, (3) a request cheap in "
            "compute but large in memory (host load-back) admitted through the gap."
        )
    return lines


def unreserved_tail(rr: Replayed, rc: RootCause | None) -> Cause:
    """Held when the victim's truncation left chunk budget and a request that the fix
    refuses was admitted through it."""
    if not rr.rebuild.oom:
        return Cause("unreserved_tail", False, "no out-of-memory in these logs")
    if rc is None:
        pre = rr.results.get(AS_RAN)
        if pre is None or pre.oom is None:
            return Cause(
                "unreserved_tail",
                None,
                "cannot tell: the prefix replay does not reach the out-of-memory",
            )
        return Cause(
            "unreserved_tail", False, f"{pre.oom.rid} was never truncated in the replayed rounds"
        )
    rnd, left = rc.round, rc.leftover_chunk_budget
    start, end = rc.victim_piece
    evidence = [
        f"prefix ledger, round {rnd}: {rc.victim_rid} truncated to [{start}, {end}), "
        f"{left} chunk budget left, tail {rc.unreserved_tail} not reserved",
        _considered(_truncations(rr)[0]),
    ]
    if not left or left <= 0:
        why = f"{rc.victim_rid}'s truncation spent the whole chunk budget: no gap"
        return Cause("unreserved_tail", False, why, evidence, rnd, rc)
    if not rc.intruder_rid:
        why = (
            f"{left} tokens of chunk budget were left after {rc.victim_rid}'s truncation, but "
            "no request that the fix refuses came through"
        )
        return Cause("unreserved_tail", False, why, evidence, rnd, rc)
    evidence.append(
        f"{rc.intruder_rid} admitted after it: load-back {rc.intruder_load_back}, memory "
        f"check {rc.intruder_need} < {rc.intruder_rem_total_tokens}; refused under fixed"
    )
    summary = (
        f"{rc.intruder_rid} came through the {left}-token gap "
        f"after {rc.victim_rid}'s truncation and took its unreserved tail's slots"
    )
    return Cause("unreserved_tail", True, summary, evidence, rnd, rc, story(rc))
