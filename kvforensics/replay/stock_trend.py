"""The batch lines before a crash, as a trend: pool usage, chunk use, queue and transfer
depth. Read off `Prefill batch` lines; nothing here is inferred."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import polars as pl

from kvforensics.rounds.batches import FIELDS as BATCH_FIELDS
from kvforensics.rounds.provenance import where

#: per-line fields shown, in this order, when the lines print them: a batch round's
#: fields, then the PD queues' depths
SHOWN = (*BATCH_FIELDS, "prealloc_req", "pending_token")
TREND_LINES = 8
#: a printed field's value as the line gives it (a count, or a usage ratio)
Number = int | float


@dataclass(frozen=True, slots=True)
class Series:
    """One field over the batch lines: its first, last and largest printed value."""

    first: Number
    last: Number
    max: Number

    def as_dict(self) -> dict[str, Any]:
        return {"first": self.first, "last": self.last, "max": self.max}


@dataclass(frozen=True, slots=True)
class NewTokens:
    """`#new-token` over the batch lines, and how many were a whole chunk."""

    max: int
    chunk_size: int | None
    #: None when the chunk size is not known (a full chunk cannot be told)
    full_chunks: int | None

    def as_dict(self) -> dict[str, Any]:
        return {"max": self.max, "chunk_size": self.chunk_size, "full_chunks": self.full_chunks}


@dataclass(frozen=True, slots=True)
class TrendLine:
    """One batch line as shown: where it is, its rank and the fields the lines print
    (in ``SHOWN`` order; which ones depends on the release)."""

    where: str
    rank: str
    fields: tuple[tuple[str, Any], ...]

    def as_dict(self) -> dict[str, Any]:
        return {"where": self.where, "rank": self.rank, **dict(self.fields)}


@dataclass(frozen=True, slots=True)
class BatchTrend:
    """The `Prefill batch` lines up to the crash (or the log's end). A field is None when
    no line prints it; with no line at all only ``lines`` and ``until`` are told."""

    lines: int
    until: str
    last_lines: tuple[TrendLine, ...] = ()
    token_usage: Series | None = None
    queue_req: Series | None = None
    transferring_req: Series | None = None
    inflight_req: Series | None = None
    running_req: Series | None = None
    new_token: NewTokens | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"lines": self.lines, "until": self.until}
        if not self.lines:
            return out
        out["last_lines"] = [ln.as_dict() for ln in self.last_lines]
        spans = {
            "token_usage": self.token_usage,
            "queue_req": self.queue_req,
            "transferring_req": self.transferring_req,
            "inflight_req": self.inflight_req,
            "running_req": self.running_req,
        }
        # a field no line prints has no key (not a null)
        out.update({k: s.as_dict() for k, s in spans.items() if s is not None})
        if self.new_token is not None:
            out["new_token"] = self.new_token.as_dict()
        return out


def lines_before(events: pl.DataFrame, kind: str, fatal_where: str | None) -> pl.DataFrame:
    """Lines of `kind` up to the crash: in the crash's file, those above it; in other
    files, those not later than its time (the whole file when times are missing)."""
    rows = events.with_row_index("_i").filter(pl.col("kind") == kind)
    if fatal_where is None:
        return rows
    name, line = fatal_where.rsplit(":", 1)
    crash = events.filter(
        pl.col("file").str.split("/").list.last() == name, pl.col("line") == int(line)
    )
    if not crash.height:
        return rows
    c = crash.row(0, named=True)
    same = pl.col("file") == c["file"]
    earlier = pl.col("line") < c["line"]
    if c["time"] is None:
        return rows.filter(pl.when(same).then(earlier).otherwise(True))
    in_time = pl.col("time").is_null() | (pl.col("time") <= c["time"])
    return rows.filter(pl.when(same).then(earlier).otherwise(in_time))


def _span(col: pl.Series) -> Series | None:
    s = col.drop_nulls()
    if not len(s):
        return None
    # (polars types a Series' max as any literal: these are numbers)
    return Series(s[0], s[-1], cast(Number, s.max()))


def batch_trend(events: pl.DataFrame, fatal_where: str | None, chunk: int | None) -> BatchTrend:
    rows = lines_before(events, "prefill_batch", fatal_where)
    until = fatal_where or "end of log"
    if not rows.height:
        return BatchTrend(0, until)
    cols = [c for c in SHOWN if c in rows.columns and rows[c].is_not_null().any()]

    def span(c: str) -> Series | None:
        return _span(rows[c]) if c in cols else None

    new_token = None
    if "new_token" in cols:
        nt = rows["new_token"].drop_nulls()
        full = int((nt == chunk).sum()) if chunk else None
        new_token = NewTokens(cast(int, nt.max()), chunk, full)
    return BatchTrend(
        rows.height,
        until,
        tuple(
            TrendLine(where(r), r["rank"], tuple((c, r[c]) for c in cols))
            for r in rows.tail(TREND_LINES).iter_rows(named=True)
        ),
        token_usage=span("token_usage"),
        queue_req=span("queue_req"),
        transferring_req=span("transferring_req"),
        inflight_req=span("inflight_req"),
        running_req=span("running_req"),
        new_token=new_token,
    )
