"""Rebuilt rounds written as they stream by: NDJSON (one round per line, as ``--format
json`` gives it) or Parquet (one row per piece, with its round's numbers), so the file
grows and memory does not."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import polars as pl

from kvforensics.rounds.records import Round

SUFFIXES = (".ndjson", ".parquet")
#: rounds per Parquet part
BATCH = 20_000
PIECE_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "round": pl.Int64,
    "time": pl.Datetime("us"),
    "observed": pl.Boolean,
    "rid": pl.Utf8,
    "start": pl.Int64,
    "end": pl.Int64,
    "kind": pl.Utf8,
    "provenance": pl.Utf8,
    "evidence": pl.Utf8,
    "baseline": pl.Int64,
    "baseline_provenance": pl.Utf8,
    "baseline_end": pl.Int64,
    "oom_tokens": pl.Int64,
}


def piece_rows(rnd: Round) -> list[tuple[Any, ...]]:
    """One row per piece (one row with no piece for a round without any)."""
    base = rnd.baseline
    head = (rnd.index, rnd.time, rnd.observed)
    tail = (
        base.value if base else None,
        base.provenance if base else None,
        rnd.baseline_end.value if rnd.baseline_end else None,
        rnd.oom.tokens if rnd.oom else None,
    )
    if not rnd.pieces:
        return [(*head, None, None, None, None, None, None, *tail)]
    return [
        (*head, p.rid, p.start, p.end, p.kind, p.provenance, "; ".join(p.evidence), *tail)
        for p in rnd.pieces
    ]


def write_rounds(rounds: Iterable[Round], path: Path) -> int:
    """Write ``rounds`` to ``path`` (its suffix says the format). Returns how many."""
    if path.suffix == ".ndjson":
        return _ndjson(rounds, path)
    return _parquet(rounds, path)


def _ndjson(rounds: Iterable[Round], path: Path) -> int:
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for rnd in rounds:
            fh.write(json.dumps(rnd.as_dict(), ensure_ascii=False) + "\n")
            n += 1
    return n


def _parquet(rounds: Iterable[Round], path: Path) -> int:
    """Parts of ``BATCH`` rounds next to ``path``, then merged into it by a streaming sink."""
    parts: list[Path] = []
    rows: list[tuple[Any, ...]] = []
    n = 0

    def flush() -> None:
        part = path.with_name(f"{path.name}.part{len(parts):05d}")
        pl.DataFrame(rows, schema=PIECE_SCHEMA, orient="row").write_parquet(part)
        parts.append(part)
        rows.clear()

    for rnd in rounds:
        rows += piece_rows(rnd)
        n += 1
        if n % BATCH == 0:
            flush()
    if rows or not parts:
        flush()
    try:
        pl.scan_parquet(parts, glob=False).sink_parquet(path)  # a [ in a name is no pattern
    finally:
        for p in parts:
            p.unlink(missing_ok=True)
    return n
