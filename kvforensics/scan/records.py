"""Typed records of a fleet scan: one ``NodeScan`` per node, dicts only at the JSON edge."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """What one per-node task reads: the node's name and its files (paths or URLs)."""

    node: str
    files: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GapAdmission:
    """A request admitted after a truncation, in the chunk budget the truncation left,
    while the truncated request's tail was promised to nobody."""

    round: int
    time: str | None
    victim_rid: str
    unreserved_tail: int
    intruder_rid: str
    intruder_compute: int
    intruder_load_back: int
    #: the memory check it passed (rem_total_tokens at that step)
    rem_total_tokens: int | None
    #: the chunk budget left by the truncation
    leftover_chunk_budget: int | None


@dataclass(frozen=True, slots=True)
class Margin:
    """What a round left (available + evictable after its allocation) minus the tails that
    no one reserved. Negative: the promised tails no longer fit unless memory is freed."""

    round: int
    time: str | None
    left: int
    unreserved_tails: int
    margin: int
    #: the round itself could not allocate (its margin is available minus requested)
    oom: bool = False


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request the prefix run admitted that a fix refuses in the same round."""

    round: int
    rid: str
    #: how much later its prefill finishes under the fix (None: not within the run)
    delay_s: float | None


@dataclass(frozen=True, slots=True)
class WholeLog:
    """The whole-log findings of one node."""

    gap_admissions: tuple[GapAdmission, ...]
    #: the lowest margin of each stretch of rounds, in round order (the tightest among them)
    margins: tuple[Margin, ...]
    refused: dict[str, tuple[Refusal, ...]]
    rounds_rerun: int
    notes: tuple[str, ...] = ()

    def tightest(self) -> Margin | None:
        """The least margin; the earliest round among equals."""
        return min(self.margins, key=lambda m: (m.margin, m.round), default=None)

    def as_dict(self) -> dict:
        tight = self.tightest()
        return {
            "gap_admissions": [asdict(g) for g in self.gap_admissions],
            "tightest_margin": asdict(tight) if tight else None,
            "refused": {
                p: {"requests": len(rs), "delays": [asdict(r) for r in rs]}
                for p, rs in self.refused.items()
            },
            "rounds_rerun": self.rounds_rerun,
            "notes": list(self.notes),
        }


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

    round: int | None
    rid: str | None
    tokens: int | None
    available: int | None
    swa_available: int | None = None
    mamba_available: int | None = None
    reproduced: bool | None
    causes: tuple[HeldCause, ...]
    where: str | None = None
    #: a release log's event: its JSON carries ``where``
    from_release: bool = False

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "round": self.round,
            "rid": self.rid,
            "tokens": self.tokens,
            "available": self.available,
        }
        extra = {"swa_available": self.swa_available, "mamba_available": self.mamba_available}
        out.update({k: v for k, v in extra.items() if v is not None})
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

    def as_dict(self) -> dict:
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
