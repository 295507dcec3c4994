"""``external_allocation`` and ``forced_resume``: memory taken where the adder cannot see
it, and the branch of ``add_chunked_req`` that then allocates memory that is not there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvforensics.causes.cause import Cause
from kvforensics.causes.oom import oom_words

if TYPE_CHECKING:
    from kvforensics.causes.replayed import Replayed
    from kvforensics.replay.anchor import Anchoring, Shift
    from kvforensics.rounds.drop import Drop
    from kvforensics.rounds.rebuild import Rebuild
    from kvforensics.rounds.records import Round


@dataclass(frozen=True, slots=True, kw_only=True)
class TakenFigures:
    """Memory taken outside the adder: in all, between which rounds the first was, and
    each fall (``drops``, from the continuity check) or event (``events``, anchoring)."""

    tokens: int
    after_round: int | None
    before_round: int
    drops: tuple[Drop, ...] = ()
    events: tuple[Shift, ...] = ()

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "tokens": self.tokens,
            "after_round": self.after_round,
            "before_round": self.before_round,
        }
        if self.events:
            out["events"] = [s.as_dict() for s in self.events]
        else:
            out["drops"] = [d.as_dict() for d in self.drops]
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumeFigures:
    """The resumed piece at the out-of-memory and the budget it was sized against."""

    rid: str | None
    piece: tuple[int, int]
    seq_len: int | None
    rem_total_tokens: int
    rem_chunk_tokens: int

    def as_dict(self) -> dict[str, object]:
        return {
            "rid": self.rid,
            "piece": list(self.piece),
            "seq_len": self.seq_len,
            "rem_total_tokens": self.rem_total_tokens,
            "rem_chunk_tokens": self.rem_chunk_tokens,
        }


def external_allocation(rr: Replayed) -> Cause:
    """Held when a baseline fell by more than the logged allocations and load-backs explain
    (``rounds.continuity``). With an out-of-memory, only what was taken in the crashing
    request's life counts (before it, the adder saw the lower baseline), as the forward
    run held to the observations found it (``replay.anchor``)."""
    found = rr.anchoring
    if found is not None:
        return _from_anchoring(found)
    drops = [d for d in rr.drops if max(d.bounds) > 0]
    if not drops:
        return Cause(
            "external_allocation", False, "every observed baseline follows from the round before it"
        )
    total = sum(d.tokens for d in drops)
    first = drops[0]
    evidence = [e for d in drops for e in d.evidence]
    story = []
    for d in drops:
        size = f"{d.tokens}" if d.bounds[0] == d.bounds[1] else f"{d.bounds[0]} to {d.bounds[1]}"
        story.append(
            f"Between rounds {d.after_round} and {d.before_round} the baseline fell by {size} "
            "tokens more than the logged allocations and load-backs explain: something outside "
            "the adder took them (an asynchronous load-back, a leak, another user of the pool)."
        )
    summary = (
        f"{total} tokens taken outside the adder in {len(drops)} fall(s), the first "
        f"between rounds {first.after_round} and {first.before_round}"
    )
    figures = TakenFigures(
        tokens=total,
        after_round=first.after_round,
        before_round=first.before_round,
        drops=tuple(drops),
    )
    return Cause("external_allocation", True, summary, evidence, first.before_round, figures, story)


def _from_anchoring(found: Anchoring) -> Cause:
    # a fall the first check's own prefix lock explains is the cache's, not a take
    takes = [s for s in found.shifts if s.tokens > 0 and not s.lock]
    if not takes:
        return Cause(
            "external_allocation",
            False,
            "from the crashing request's admission to the out-of-memory, every observation "
            "follows from the rounds before it without memory taken outside the adder",
        )
    total, first = sum(s.tokens for s in takes), takes[0]
    story = [f"Outside the adder: {s.sentence()}." for s in takes]
    summary = (
        f"{total} tokens taken outside the adder in {len(takes)} event(s) in the crashing "
        f"request's life, the first before round {first.round}"
        + (
            " (at least: the logs show 0 available after it)"
            if any(s.saturated for s in takes)
            else ""
        )
    )
    figures = TakenFigures(
        tokens=total, after_round=first.after, before_round=first.round, events=tuple(takes)
    )
    evidence = [s.anchor.where for s in takes]
    return Cause("external_allocation", True, summary, evidence, first.round, figures, story)


def _oom_round(rb: Rebuild) -> Round | None:
    return next((r for r in rb.rounds if r.oom is not None), None)


def forced_resume(rr: Replayed) -> Cause:
    """Held when the out-of-memory piece is a resumed chunk sized by the forced branch:
    ``rem_total_tokens <= 0`` at ``add_chunked_req`` and ``rem_chunk_tokens`` taken anyway
    for a piece that is not the request's last. On a last piece the branch did not size
    anything (the remainder was all there was to take): not claimed."""
    rb = rr.rebuild
    rnd, oom = _oom_round(rb), rb.oom
    if rnd is None or oom is None:
        return Cause("forced_resume", False, "no out-of-memory in these logs")
    rid = oom.rid
    piece = next((p for p in rnd.pieces if p.kind == "resumed" and p.rid == rid), None)
    if piece is None:
        return Cause(
            "forced_resume",
            False,
            f"the out-of-memory in round {rnd.index} is not on a resumed chunk",
        )
    baseline = rnd.baseline
    base = baseline.value if baseline else None
    if baseline is None or base is None:
        return Cause("forced_resume", None, f"cannot tell: round {rnd.index}'s baseline is unknown")
    seq = rb.seq_lens.get(rid) if rid is not None else None
    chunk = rb.cfg.chunked_prefill_size
    figures = ResumeFigures(
        rid=rid,
        piece=(piece.start, piece.end),
        seq_len=seq,
        rem_total_tokens=base,
        rem_chunk_tokens=chunk,
    )
    evidence = [
        f"round {rnd.index} baseline {base} ({baseline.provenance}: "
        f"{'; '.join(baseline.evidence)})",
        *piece.evidence,
    ]
    if base > 0:
        return Cause(
            "forced_resume",
            False,
            f"rem_total_tokens was {base} > 0 when {rid} resumed: not forced",
            evidence,
            rnd.index,
            figures,
        )
    if seq is not None and piece.end >= seq:
        return Cause(
            "forced_resume",
            False,
            f"the forced branch ran, but on {rid}'s last piece [{piece.start}, "
            f"{piece.end}): the memory was gone before it, not taken by it",
            evidence,
            rnd.index,
            figures,
        )
    summary = (
        f"add_chunked_req found rem_total_tokens {base} <= 0 in round {rnd.index} and "
        f"took rem_chunk_tokens for {rid}'s piece [{piece.start}, {piece.end})"
    )
    story = [
        f"In round {rnd.index} add_chunked_req found rem_total_tokens {base} <= 0 and took "
        f"rem_chunk_tokens ({chunk}) anyway for {rid}'s piece [{piece.start}, {piece.end}), not "
        f"its last (seq_len {seq}): allocating "
        f"{oom_words(oom.tokens, oom.available, form='with')} failed."
    ]
    return Cause("forced_resume", True, summary, evidence, rnd.index, figures, story)
