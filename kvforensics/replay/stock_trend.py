"""The batch lines before a crash, as a trend: pool usage, chunk use, queue and transfer
depth. Read off `Prefill batch` lines; nothing here is inferred."""

from __future__ import annotations

from typing import Any

import polars as pl

from kvforensics.rounds.batches import FIELDS as BATCH_FIELDS
from kvforensics.rounds.provenance import where

#: per-line fields shown, in this order, when the lines print them: a batch round's
#: fields, then the PD queues' depths
SHOWN = (*BATCH_FIELDS, "prealloc_req", "pending_token")
DEPTHS = ("queue_req", "transferring_req", "inflight_req", "running_req")
TREND_LINES = 8


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


def _span(col: pl.Series) -> dict[str, Any] | None:
    s = col.drop_nulls()
    if not len(s):
        return None
    return {"first": s[0], "last": s[-1], "max": s.max()}


def batch_trend(events: pl.DataFrame, fatal_where: str | None, chunk: int | None) -> dict[str, Any]:
    rows = lines_before(events, "prefill_batch", fatal_where)
    out: dict[str, Any] = {"lines": rows.height, "until": fatal_where or "end of log"}
    if not rows.height:
        return out
    cols = [c for c in SHOWN if c in rows.columns and rows[c].is_not_null().any()]
    shown = rows.tail(TREND_LINES)
    out["last_lines"] = [
        {"where": where(r), "rank": r["rank"], **{c: r[c] for c in cols}}
        for r in shown.iter_rows(named=True)
    ]
    if "token_usage" in cols:
        out["token_usage"] = _span(rows["token_usage"])
    for c in DEPTHS:
        if c in cols:
            out[c] = _span(rows[c])
    if "new_token" in cols:
        nt = rows["new_token"].drop_nulls()
        out["new_token"] = {
            "max": nt.max(),
            "chunk_size": chunk,
            "full_chunks": int((nt == chunk).sum()) if chunk else None,
        }
    return out
