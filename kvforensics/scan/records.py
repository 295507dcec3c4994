"""Typed records of a fleet scan: one ``NodeScan`` per node, dicts only at the JSON edge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvforensics.causes.oom import OomFigures
from kvforensics.replay.whole_log import WholeLog


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """What one per-node task reads: the node's name and its files (paths or URLs)."""

    node: str
    files: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HeldCause:
    """A cause the catalogue found held (a release log's: the message's arithmetic)."""

    id: str
    summary: str
    round: int | None

    def as_dict(self) -> dict[str, object]:
        return {"id": self.id, "summary": self.summary, "round": self.round}


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeOom:
    """One out-of-memory of a node, with its held causes. ``where`` is the line of a
    release log's message (a replayed node's out-of-memory is placed by round instead)."""

    figures: OomFigures
    reproduced: bool | None
    causes: tuple[HeldCause, ...]
    where: str | None = None
    #: a release log's event: its JSON carries ``where``
    from_release: bool = False

    @property
    def round(self) -> int | None:
        return self.figures.round

    @property
    def rid(self) -> str | None:
        return self.figures.rid

    @property
    def tokens(self) -> int | None:
        return self.figures.tokens

    @property
    def available(self) -> int | None:
        return self.figures.available

    def as_dict(self) -> dict[str, object]:
        out = self.figures.as_dict()
        out.update(reproduced=self.reproduced, causes=[c.as_dict() for c in self.causes])
        if self.from_release:
            out["where"] = self.where
        return out


@dataclass(frozen=True, slots=True)
class NodeScan:
    """One node's result. ``error`` set: nothing could be replayed (the reason in a line)."""

    node: str
    files: tuple[str, ...]
    error: str | None = None
    #: files of the node that could not be read: (file, reason)
    unreadable: tuple[tuple[str, str], ...] = ()
    bytes_read: int = 0
    rounds: int = 0
    logged_rounds: int = 0
    ooms: tuple[NodeOom, ...] = ()
    whole_log: WholeLog | None = None
    fidelity_rounds: int = 0
    mismatches: int = 0
    contradictions: int = 0
    exit_code: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        wl = self.whole_log.as_dict() if self.whole_log else None
        return {
            "node": self.node,
            "files": list(self.files),
            "error": self.error,
            "unreadable": [{"file": f, "reason": r} for f, r in self.unreadable],
            "bytes_read": self.bytes_read,
            "rounds": self.rounds,
            "logged_rounds": self.logged_rounds,
            "ooms": [o.as_dict() for o in self.ooms],
            "gap_admissions": wl["gap_admissions"] if wl else [],
            "tightest_margin": wl["tightest_margin"] if wl else None,
            "refused": wl["refused"] if wl else {},
            "fidelity": {"rounds_checked": self.fidelity_rounds, "mismatches": self.mismatches},
            "contradictions": self.contradictions,
            "exit_code": self.exit_code,
            "notes": list(self.notes) + (wl["notes"] if wl else []),
        }
