"""One cause of an out-of-memory as a detector found it: held, not held, or cannot tell."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
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
    figures: dict = field(default_factory=dict)
    story: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "held": self.held,
            "summary": self.summary,
            "evidence": list(self.evidence),
            "round": self.round,
            **self.figures,
        }
