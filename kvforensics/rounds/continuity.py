"""Continuity between rounds: does each observed baseline follow from what came before?

Between two rounds the baseline (free + evictable) can only rise on this node: a KV
transfer that ends turns held slots into cache. Within a round it falls by the round's
own load-backs and allocations, and at the next round's first check by the lock of that
request's device prefix. So a fall from what the previous round left to the next observed
baseline that is larger than that lock is memory taken by something the adder never saw
(an asynchronous load-back, a leak, another user of the pool).

A transfer ending in the same gap could hide part of such a fall, never fake one: the
reported size is a lower bound, and exact when no transfer can have ended. Across a long
silence of the log (over ``SILENCE_S``) nothing is claimed: the log is no record of the node
there (a restart, a lost file, two bundles joined), and the gap is noted instead.
"""

from __future__ import annotations

from kvforensics.rounds.drop import Drop
from kvforensics.rounds.rebuild import Rebuild, Round

#: seconds without a line after which the log is no record of the node
SILENCE_S = 60


def _check(prev: Round, rnd: Round, page: int) -> Drop | None:
    """``prev`` left ``prev.baseline_end``; ``rnd``'s first check saw ``rnd.baseline``."""
    left, seen = prev.baseline_end, rnd.baseline
    if left is None or seen is None or left.value is None or seen.value is None:
        return None
    fall = left.value - seen.value
    lock = max(rnd.decisions[0].prefix_len, 0) if rnd.decisions else 0
    least = fall - lock
    # Whole pages: a fall inside one page is the partial-page rounding of the books.
    if least < page:
        return None
    evidence = [
        f"round {prev.index} left {left.value} ({left.provenance}: {'; '.join(left.evidence)})",
        f"round {rnd.index} saw {seen.value} ({seen.provenance}: {'; '.join(seen.evidence)})",
    ]
    if lock:
        evidence.append(
            f"up to {lock} of the fall may be the lock of {rnd.decisions[0].rid}'s device prefix"
        )
    return Drop(prev.index, rnd.index, least, (least, fall), evidence)


class Continuity:
    """Fed the rounds in order: every fall between consecutive rounds that the evidence
    does not explain (``found``), and the silences where nothing is claimed (``notes``).

    Only an observed baseline is compared: an inferred one was computed assuming nothing
    changed, so it cannot show a change (silent rounds bring their own findings from
    the rebuild, in ``Rebuild.drops``).
    """

    def __init__(self, page_size: int) -> None:
        self.page = page_size
        self.prev: Round | None = None
        self.found: list[Drop] = []
        self.notes: list[str] = []

    def add(self, rnd: Round) -> None:
        prev, self.prev = self.prev, rnd
        if prev is None or rnd.baseline is None or rnd.baseline.provenance != "observed":
            return
        if prev.time is not None and rnd.time is not None:
            silence = (rnd.time - prev.time).total_seconds()
            if silence > SILENCE_S:
                self.notes.append(
                    f"continuity not checked between rounds {prev.index} and {rnd.index}: "
                    f"the log is silent for {silence:.0f} s"
                )
                return
        d = _check(prev, rnd, self.page)
        if d is not None:
            self.found.append(d)

    def drops(self, rebuilt: list[Drop]) -> list[Drop]:
        """The rebuild's own findings and these, in round order."""
        return sorted([*rebuilt, *self.found], key=lambda d: d.before_round)


def unexplained_drops(rb: Rebuild, notes: list[str] | None = None) -> list[Drop]:
    """Every fall between consecutive rounds of ``rb`` that the evidence does not explain."""
    check = Continuity(rb.cfg.page_size)
    for rnd in rb.rounds:
        check.add(rnd)
    if notes is not None:
        notes.extend(check.notes)
    return check.drops(list(getattr(rb, "drops", []) or []))
