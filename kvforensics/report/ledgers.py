"""Reading a ledger back into rounds: what was admitted, what is still owed.

A ledger file may come from another machine or from CSV (where every null column
reads back as text), so frames are normalised to the model's schema before use."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import TypeVar, cast

import polars as pl

from kvforensics.causes.oom import OomFigures
from kvforensics.errors import InputError
from kvforensics.model import RunResult
from kvforensics.model.decisions import ADDER_CALLS, ADMITTED, BudgetState, Call
from kvforensics.model.ledger import LATER, NAMES, SCHEMA, Step, from_values

__all__ = [
    "ADDER_CALLS",
    "ADMITTED",
    "RoundSummary",
    "frame_of",
    "held",
    "ledger_of",
    "round_summaries",
    "steps_of",
]

T = TypeVar("T")


def held(value: T | None) -> T:
    """A ledger value the schema makes nullable but that rows of this kind always hold (a
    round, a request id, an admitted piece's end). Said to the type checker only: a
    damaged file's null goes on, as it always did, to where it is used."""
    return cast(T, value)


def frame_of(result: RunResult) -> pl.DataFrame:
    """A run's ledger as a frame with the policy as its first column."""
    return result.ledger.to_frame().select(pl.lit(result.policy).alias("policy"), pl.all())


def normalize(df: pl.DataFrame, source: str = "ledger") -> pl.DataFrame:
    """Cast to the ledger schema (CSV loses dtypes); refuse frames that are not ledgers."""
    missing = [c for c in NAMES if c not in df.columns and c not in LATER]
    if missing:
        raise InputError(f"{source}: not a ledger (missing columns: {', '.join(missing[:5])})")
    cols = [
        (pl.col(c) if c in df.columns else pl.lit(None)).cast(SCHEMA[c], strict=False).alias(c)
        for c in NAMES
    ]
    if "policy" in df.columns:
        cols.insert(0, pl.col("policy").cast(pl.Utf8))
    return df.select(cols)


def ledger_of(x: RunResult | pl.DataFrame) -> pl.DataFrame:
    return normalize(frame_of(x) if isinstance(x, RunResult) else x)


def steps_of(df: pl.DataFrame) -> list[Step]:
    """A normalised ledger's rows as the model's records, in frame order: read by
    attribute, so a renamed column fails where the type checker looks."""
    return [from_values(t) for t in df.select(NAMES).iter_rows()]


def policies_in(df: pl.DataFrame) -> list[str]:
    if "policy" not in df.columns:
        return []
    return list(dict.fromkeys(df["policy"].drop_nulls().to_list()))


def select_policy(df: pl.DataFrame, policy: str | None, source: str) -> tuple[str, pl.DataFrame]:
    """One policy's rows of a ledger file; a file with several needs a choice."""
    df = normalize(df, source)
    names = policies_in(df)
    if policy is None:
        if len(names) > 1:
            raise InputError(
                f"{source} holds several policies ({', '.join(names)}); choose with --policy"
            )
        return (names[0] if names else Path(source).stem), df
    if policy not in names:
        raise InputError(
            f"{source}: no policy {policy!r} in this ledger (it has {', '.join(names) or 'none'})"
        )
    return policy, df.filter(pl.col("policy") == policy)


def page_size_of(x: RunResult | pl.DataFrame) -> int | None:
    """The page size: from the pool when we have one. A ledger alone does not record it,
    but every offset charge is `ceil_page(piece) + page (+1)`, so the gcd of the
    `cur_rem_token_offset` charges is a multiple of it (equal to it in practice)."""
    if isinstance(x, RunResult):
        return x.pool.page_size
    charges = (
        x.filter(pl.col("call").is_in(ADDER_CALLS))
        .select((pl.col("cur_offset_after") - pl.col("cur_offset_before")).alias("d"))
        .drop_nulls()["d"]
        .to_list()
    )
    g = reduce(math.gcd, [c for c in charges if c > 0], 0)
    return g or None


@dataclass(slots=True)
class RoundSummary:
    round: int
    pieces: list[tuple[str, int, int]]
    #: (call, rid, decision, budget_state) of the adder's rows
    decisions: list[tuple[str, str, str, str]]
    baseline_first: int | None  # the baseline the round's first step saw
    baseline_after: int | None  # after the round's last step (its allocation)
    #: tokens admitted in earlier rounds (a chunked request's tail) not yet allocated
    unallocated_tail: int
    oom: OomFigures | None = None
    rids: set[str] = field(default_factory=set)


def round_summaries(df: pl.DataFrame) -> list[RoundSummary]:
    """Per round of one policy's ledger. The unallocated tail is rebuilt from the
    allocate rows: a request's tail is what it still has to compute after its last
    allocated piece. A failed allocation (OOM) allocates nothing, so the tail stays."""
    out: list[RoundSummary] = []
    seq_len: dict[str, int] = {}
    allocated_end: dict[str, int] = {}
    cur: RoundSummary | None = None
    for row in steps_of(df.sort(["round", "step"], maintain_order=True)):
        if cur is None or row.round != cur.round:
            if cur is not None:
                cur.unallocated_tail = _tail(seq_len, allocated_end)
            cur = RoundSummary(held(row.round), [], [], row.baseline, None, 0)
            out.append(cur)
        _add_row(cur, row, seq_len, allocated_end)
    if cur is not None:
        cur.unallocated_tail = _tail(seq_len, allocated_end)
    return out


def _add_row(
    cur: RoundSummary, row: Step, seq_len: dict[str, int], allocated_end: dict[str, int]
) -> None:
    """One ledger row into its round's summary (and the requests' lengths and ends)."""
    rid = held(row.rid)
    cur.rids.add(rid)
    cur.baseline_after = row.baseline_after
    if row.call in ADDER_CALLS:
        if row.seq_len is not None:
            seq_len[rid] = row.seq_len
        cur.decisions.append((held(row.call), rid, held(row.decision), held(row.budget_state)))
        if row.decision in ADMITTED and row.start is not None:
            cur.pieces.append((rid, row.start, held(row.end)))
    elif row.call == Call.ALLOCATE:
        if row.budget_state == BudgetState.OOM:
            # what the round tried to allocate: the raw lengths of its pieces
            cur.oom = OomFigures(
                round=cur.round,
                rid=rid,
                tokens=sum(e - s for _, s, e in cur.pieces),
                available=row.baseline,
            )
        elif row.end is not None:
            allocated_end[rid] = max(allocated_end.get(rid, 0), row.end)


def _tail(seq_len: dict[str, int], allocated_end: dict[str, int]) -> int:
    return sum(
        seq_len[rid] - end
        for rid, end in allocated_end.items()
        if rid in seq_len and 0 < end < seq_len[rid]
    )
