"""Numbers a scheduler log cannot mean. A line carrying one is unreadable: it is counted
and sampled in the summary and dropped, so no later stage computes with it.

The rules go by field name (one column per name across every format): token counts and
lengths are whole, non-negative and below any pool; the adder's remaining budgets may go
negative but not past the same bound; a piece cannot end before it starts."""

from __future__ import annotations

import math
from functools import lru_cache

import polars as pl

from kvforensics.model.config import MAX_TOKENS

#: What an integer field holds when its text does not fit 64 bits (see extract._convert).
SATURATED = 2**63 - 1

#: token counts and lengths the rebuild computes with: 0 <= v <= MAX_TOKENS (the batch
#: lines' counts are only compared with, so a negative one there is a mismatch to show)
COUNTS = (
    "seq_len",
    "prefix_len",
    "host_hit_len",
    "extend_start",
    "extend_end",
    "loaded",
    "blocks",
    "extend_tokens",
    "oom_tokens",
    "oom_available",
    "oom_available_size",
    "oom_evictable_size",
    "oom_swa_available",
    "oom_swa_available_size",
    "oom_swa_evictable_size",
    "oom_mamba_available",
    "oom_mamba_available_size",
    "oom_mamba_evictable_size",
    "oom_lru_evictable",
    "retracted_reqs",
)
#: sizes that divide: a zero would be a division by zero downstream
POSITIVE = ("block_size",)
#: the adder's budgets: signed, but bounded
SIGNED = ("rem_chunk_tokens", "baseline", "rem_total_tokens", "cur_rem_tokens")
#: (start, end) pairs of one piece
ORDERED = (("extend_start", "extend_end"),)
#: (count, size) pairs whose product is a token count: an AttentionStore write's blocks
PRODUCTS = (("blocks", "block_size"),)


@lru_cache(maxsize=32)
def _reasons(
    cols: frozenset[str], floats: tuple[str, ...], ints: tuple[str, ...]
) -> list[tuple[pl.Expr, pl.Expr]]:
    """One (broken, reason text) pair per rule (built once per set of columns: building
    the expressions costs as much as running them on a chunk)."""
    out: list[tuple[pl.Expr, pl.Expr]] = []

    def rule(bad: pl.Expr, text: pl.Expr) -> None:
        out.append((bad.fill_null(False), text))

    def value(c: str) -> pl.Expr:
        return pl.format(f"{c}={{}}", pl.col(c).cast(pl.String))

    for c in ints:
        rule(pl.col(c) == SATURATED, pl.lit(f"{c} does not fit 64 bits"))
    for c in (c for c in COUNTS if c in cols):
        rule(pl.col(c) < 0, pl.format("{} is negative", value(c)))
        rule(pl.col(c).is_between(MAX_TOKENS + 1, SATURATED - 1), _beyond(value(c)))
    for c in (c for c in POSITIVE if c in cols):
        rule(pl.col(c) <= 0, pl.format("{} must be positive", value(c)))
        rule(pl.col(c).is_between(MAX_TOKENS + 1, SATURATED - 1), _beyond(value(c)))
    for a, b in (p for p in PRODUCTS if set(p) <= cols):
        # in floats: two counts each within 2**40 can still overflow 64 bits multiplied
        tokens = pl.col(a).cast(pl.Float64) * pl.col(b).cast(pl.Float64)
        rule(
            tokens > MAX_TOKENS,
            _beyond(pl.format("{}={} x {}={}", pl.lit(a), pl.col(a), pl.lit(b), pl.col(b))),
        )
    for c in (c for c in SIGNED if c in cols):
        rule(pl.col(c).abs().is_between(MAX_TOKENS + 1, SATURATED - 1), _beyond(value(c)))
    for a, b in (p for p in ORDERED if set(p) <= cols):
        rule(
            pl.col(b) < pl.col(a),
            pl.format("the piece [{}, {}) ends before it starts", pl.col(a), pl.col(b)),
        )
    if {"seq_len", "prefix_len"} <= cols:
        # SGLang caps the match at seq_len - 1: at least one token is always computed
        hit = pl.col("prefix_len") + (
            pl.col("host_hit_len").fill_null(0) if "host_hit_len" in cols else pl.lit(0)
        )
        rule(
            hit >= pl.col("seq_len"),
            pl.format(
                "prefix and host hit ({}) leave nothing of seq_len={}", hit, pl.col("seq_len")
            ),
        )
    for c in floats:
        rule(~pl.col(c).is_finite(), pl.format("{} is not a finite number", value(c)))
    return out


def _beyond(text: pl.Expr) -> pl.Expr:
    return pl.format(f"{{}} is beyond any pool (2**{int(math.log2(MAX_TOKENS))})", text)


def split_unreadable(
    events: pl.DataFrame, int_fields: list[str], float_fields: list[str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(readable events, unreadable ones with a `why` column)."""
    cols = frozenset(events.columns)
    ints = tuple(c for c in int_fields if c in cols)
    floats = tuple(c for c in float_fields if c in cols)
    reasons = _reasons(cols, floats, ints)
    none = events.clear().with_columns(pl.lit(None, dtype=pl.String).alias("why"))
    if not reasons or events.height == 0:
        return events, none
    # Each rule is tested alone (cheap: most columns are null on most rows) and texts are
    # written only for the rules some row breaks, on those rows: formatting every value
    # of every row, or one wide `any`, costs more than all the tests.
    hits = events.select([bad.alias(f"r{i}") for i, (bad, _) in enumerate(reasons)])
    broken = [i for i, c in enumerate(hits.columns) if hits[c].any()]
    if not broken:
        return events, none
    rows = hits.select(pl.any_horizontal([f"r{i}" for i in broken])).to_series()
    why = pl.coalesce([pl.when(reasons[i][0]).then(reasons[i][1]) for i in broken])
    return events.filter(~rows), events.filter(rows).with_columns(why.alias("why"))
