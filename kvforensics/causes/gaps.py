"""Admissions through a gap, read off an adder's steps: a truncation that left chunk
budget while its tail was reserved by nobody, and the requests let in after it in the
same round. The root cause (``causes.tail``) and the whole-log scan (``scan.whole_log``)
both ask this question; the answer lives here so that they cannot drift apart."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from kvforensics.model.decisions import CHUNKED, ENTERED
from kvforensics.model.ledger import Step


def unreserved(step: Step) -> int:
    """The tail a truncation left for later rounds when no one reserved it, else 0."""
    if step.decision not in CHUNKED or step.end is None or step.seq_len is None:
        return 0
    tail = step.seq_len - step.end
    return tail if tail > 0 and not step.reserved_tail else 0


def leaves_gap(step: Step) -> bool:
    """A truncation whose tail nobody reserved and after which chunk budget is left."""
    return bool(unreserved(step)) and (step.rem_chunk_after or 0) > 0


def entered_after(steps: Sequence[Step], cut: Step) -> list[Step]:
    """The requests admitted (``add_one_req``) in ``cut``'s round after it, in order."""
    return [
        s
        for s in steps
        if s.round == cut.round
        and s.step is not None
        and cut.step is not None
        and s.step > cut.step
        and s.decision in ENTERED
    ]


def through_gaps(adder: Iterable[Step]) -> Iterator[tuple[Step, Step]]:
    """(truncated, admitted) for every admission after a gap in one round's adder steps;
    a later truncation that leaves a gap is the one the admissions after it went through."""
    victim: Step | None = None
    for step in adder:
        if victim is not None and step.decision in ENTERED:
            yield victim, step
        if leaves_gap(step):
            victim = step
