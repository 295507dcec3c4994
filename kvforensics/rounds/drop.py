"""A fall of the baseline that the logged allocations and load-backs do not explain."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Drop:
    """Memory taken between ``after_round`` and ``before_round`` by something the adder
    never saw.

    ``tokens`` is the least the evidence forces; ``bounds`` is (least, most): they differ
    when the first check's prefix lock may account for part of the fall, or a silent
    round's piece only brackets the baseline. ``before_round`` is the first round whose
    evidence needs it (where a replay puts it back).
    """

    after_round: int
    before_round: int
    tokens: int
    bounds: tuple[int, int]
    evidence: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "after_round": self.after_round,
            "before_round": self.before_round,
            "tokens": self.tokens,
            "bounds": list(self.bounds),
            "evidence": list(self.evidence),
        }
