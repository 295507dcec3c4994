"""Batch-level rounds: without adder lines, each `Prefill batch` line of one scheduler is
one round, as much as the line says (sizes, usage, queue), nothing per request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from kvforensics.rounds.provenance import OBSERVED, where

LEVEL = "batch"
#: what a batch line gives of its round, in this order
FIELDS = (
    "new_seq",
    "new_token",
    "cached_token",
    "token_usage",
    "swa_token_usage",
    "mamba_usage",
    "running_req",
    "queue_req",
    "transferring_req",
    "inflight_req",
)


@dataclass(frozen=True, slots=True)
class BatchValues:
    """What one batch line prints of its round (None: not in this line's format)."""

    new_seq: int | None = None
    new_token: int | None = None
    cached_token: int | None = None
    token_usage: float | None = None
    swa_token_usage: float | None = None
    mamba_usage: float | None = None
    running_req: int | None = None
    queue_req: int | None = None
    transferring_req: int | None = None
    inflight_req: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The printed fields, in ``FIELDS`` order."""
        return {k: v for k in FIELDS if (v := getattr(self, k)) is not None}


assert tuple(BatchValues.__dataclass_fields__) == FIELDS, "one field a printed value"


@dataclass(frozen=True)
class BatchRound:
    index: int
    time: str | None
    rank: str
    where: str
    values: BatchValues

    def as_dict(self) -> dict[str, Any]:
        return {
            "round": self.index,
            "level": LEVEL,
            "provenance": OBSERVED,
            "time": self.time,
            "rank": self.rank,
            "where": self.where,
            **self.values.as_dict(),
        }


@dataclass(frozen=True)
class BatchRounds:
    rank: str
    other_ranks: list[str]
    rounds: list[BatchRound]

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": "stock",
            "level": LEVEL,
            "rank": self.rank,
            "other_ranks": self.other_ranks,
            "rounds": [r.as_dict() for r in self.rounds],
            "note": "one round per Prefill batch line of one scheduler; the pieces of each "
            "request are not in such a log (they need PrefillAdder lines)",
        }


def _time(ev: dict[str, Any]) -> str | None:
    if ev.get("time") is not None:
        return str(ev["time"].isoformat(sep=" "))
    return str(ev["clock"].isoformat()) if ev.get("clock") is not None else None


def batch_rounds(events: pl.DataFrame, rank: str | None = None) -> BatchRounds:
    """Rounds of `rank` (default: the rank with the most batch lines, first seen on a tie).
    Ranks of one TP group print the same batch; DP ranks schedule their own."""
    lines = events.filter(pl.col("kind") == "prefill_batch")
    counts = lines.group_by("rank", maintain_order=True).len()
    ranks = counts["rank"].to_list()
    if rank is None:
        rank = counts.sort("len", descending=True, maintain_order=True)["rank"][0] if ranks else ""
    own = lines.filter(pl.col("rank") == rank)
    cols = [c for c in FIELDS if c in own.columns]
    rounds = [
        BatchRound(
            i, _time(ev), ev["rank"], where(ev), BatchValues(**{c: ev[c] for c in cols})
        )
        for i, ev in enumerate(own.iter_rows(named=True))
    ]
    return BatchRounds(rank, [r for r in ranks if r != rank], rounds)
