"""What an allocation outside the adder could have done without a trace.

A take outside the adder shows in the logs only by what it got: a later baseline, or the
out-of-memory line's availability, falls by it. A take made while the pool had nothing
free got nothing under the code as it ran, and left no trace at all. Under a fix that
leaves memory free at that moment, the same take would have got some. So "the fix avoids
the out-of-memory" holds only for unseen takes up to some size: the least size that
undoes it is found by re-running the policy with such a take before each round where the
logged pool had nothing free (the model's rule for an outside allocation: it gets what
is free, in whole pages, and holds it to the end of the run).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kvforensics.model import RoundRecord


@dataclass(frozen=True, slots=True)
class UnseenTake:
    """The least take outside the adder, before ``before_round``, that turns a policy's
    "no out of memory" into one; ``least_slots`` None when no take up to the pool does.
    ``blind``: every round before which the logged pool had nothing free (a take there
    would have got nothing, and so shows in no line); ``at``: the blind round whose time
    ``before_round`` stands for (a round apart where the policy's rounds ran otherwise)."""

    blind: tuple[int, ...]
    before_round: int
    least_slots: int | None
    at: int | None = None

    def sentence(self) -> str:
        if self.least_slots is None:
            return "no take outside the adder the logs could not show undoes it"
        when = f"before round {self.before_round}"
        if self.at is not None and self.at != self.before_round:
            when += f" under it (about the time of round {self.at} as the code ran)"
        return (
            f"unless something outside the adder took {self.least_slots} slots or more "
            f"{when}, where the logs could not show it (nothing was free there to take "
            "under the code as it ran)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "blind_rounds": list(self.blind),
            "before_round": self.before_round,
            "least_slots": self.least_slots,
            "as_ran_round": self.at,
        }


def blind_rounds(records: Sequence[RoundRecord], start: int, last: int, page: int) -> tuple[int, ...]:
    """Rounds ``r`` (``start`` < r <= ``last``) before which the ``prefix`` run, held to
    the logs, had less than a page free: a take then got nothing under the code as it ran.

    NOTE: read from the round before's end (``baseline_end``): inside the window the logs
    anchor, no transfer ends on the model's clock between two rounds."""
    end = {rec.round: rec.baseline_end for rec in records}
    return tuple(r for r in range(start + 1, last + 1) if r - 1 in end and end[r - 1] < page)


def least_take(
    runs_out: Callable[[int, int], bool],
    blind: tuple[int, ...],
    *,
    pool: int,
    page: int,
    first: int | None = None,
) -> UnseenTake | None:
    """The least take (whole pages) before one of the ``blind`` rounds, or a round either
    side of one, for which ``runs_out(round, slots)`` holds; None when no round is blind.

    Args:
        runs_out: True when the policy, with that take added before that round, runs out
            of memory.
        blind: rounds before which a take would have left no trace (``blind_rounds``).
        pool: the largest take there can be (slots).
        page: the pool's page (slots).
        first: the earliest round a take may precede (the round after the start); None:
            the blind rounds only, no round either side.

    Returns:
        The least take found and its round; ``least_slots`` None when even a take of the
        whole pool leaves the policy without an out-of-memory.
    """
    if not blind:
        return None
    # the earliest and the latest blind round only: the work stays bounded on any window.
    # NOTE: a take happens at a time; under a policy whose rounds ran otherwise, the time
    # of a blind round falls in the round before or after it (as the anchored events do).
    ends = sorted({blind[0], blind[-1]})
    near = (-1, 0, 1) if first is not None else (0,)
    tried = sorted({(b + d, b) for b in ends for d in near if first is None or b + d >= first})
    best: tuple[int, int, int] | None = None
    for r, b in tried:
        top = pool // page
        if not runs_out(r, top * page):
            continue
        lo, hi = 0, top  # lo pages: no out of memory (none taken); hi pages: out of memory
        if best is not None:
            hi = min(hi, best[1] // page)
            if not runs_out(r, hi * page):
                continue
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if runs_out(r, mid * page) else (mid, hi)
        if best is None or hi * page < best[1]:
            best = (r, hi * page, b)
    if best is None:
        return UnseenTake(blind, blind[-1], None)
    return UnseenTake(blind, best[0], best[1], best[2])
