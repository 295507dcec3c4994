"""One cause of an out-of-memory as a detector found it: held, not held, or cannot tell."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


class Figures(Protocol):
    """A cause's numbers: typed for the code that reads them, a dict for the JSON."""

    def as_dict(self) -> dict[str, object]: ...


@dataclass(frozen=True, slots=True)
class Cause:
    """A detector's finding.

    ``held``: True when the evidence shows the mechanism, False when it rules it out, None
    when the logs cannot tell. ``round`` places the finding among the events (the verdict
    tells held causes in that order); ``story`` is what the verdict says about it;
    ``figures`` are the numbers behind it (in the JSON next to the other fields).
    """

    id: str
    held: bool | None
    summary: str
    evidence: list[str] = field(default_factory=list)
    round: int | None = None
    figures: Figures | None = None
    story: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "held": self.held,
            "summary": self.summary,
            "evidence": list(self.evidence),
            "round": self.round,
            **(self.figures.as_dict() if self.figures is not None else {}),
        }
