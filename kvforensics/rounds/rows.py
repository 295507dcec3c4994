"""The deciding rank's rebuild events as typed rows, one tuple per event, each with only
what the segmenter reads of its kind.

Making the rows is much of the cost of a rebuild, so they are built a column at a time
and a result line that comes right after its check (the common case) rides on the
check's row: the segmenter applies it to the decision the check opens, as it would the
next row.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from itertools import repeat
from typing import Any, Literal, NamedTuple, cast

import polars as pl


class Check(NamedTuple):
    """``add_one_req``'s check line; ``decided``: its result line came right after it
    (``decision`` .. ``extend_end`` are that line's)."""

    kind: Literal["adder_check"]
    where: str
    time: datetime | None
    rid: str
    seq_len: int
    prefix_len: int
    host_hit_len: int
    rem_chunk_tokens: int
    baseline: int
    rem_total_tokens: int
    cur_rem_tokens: int
    decided: bool
    decision: str | None
    result: str | None
    extend_start: int | None
    extend_end: int | None


class Result(NamedTuple):
    kind: Literal["adder_result"]
    where: str
    time: datetime | None
    rid: str
    decision: str | None
    result: str | None
    extend_start: int | None
    extend_end: int | None


class LoadBack(NamedTuple):
    kind: Literal["hicache_load_back"]
    where: str
    time: datetime | None
    rid: str
    loaded: int | None


class Write(NamedTuple):
    kind: Literal["as_write"]
    where: str
    time: datetime | None
    rid: str
    blocks: int
    block_size: int


class Oom(NamedTuple):
    kind: Literal["oom"]
    where: str
    time: datetime | None
    oom_tokens: int | None
    oom_available: int | None
    oom_available_size: int | None
    oom_evictable_size: int | None
    oom_swa_available: int | None
    oom_swa_available_size: int | None
    oom_swa_evictable_size: int | None
    oom_mamba_available: int | None
    oom_mamba_available_size: int | None
    oom_mamba_evictable_size: int | None
    #: the lines the message carries after its head (the sizes, the tree dump)
    attached: str | None


#: one event row of a rebuild, told apart by its ``kind``
Row = Check | Result | LoadBack | Write | Oom
ROW: dict[str, type[Row]] = {
    "adder_check": Check,
    "adder_result": Result,
    "hicache_load_back": LoadBack,
    "as_write": Write,
    "oom": Oom,
}
#: the event kinds a rebuild reads from the deciding rank
KINDS = tuple(ROW)
#: the columns of those events it reads
FIELDS = tuple(dict.fromkeys(f for row in ROW.values() for f in row._fields if f != "where"))
#: what a result line sets on the decision its check opened
DECIDED = ("decision", "result", "extend_start", "extend_end")

#: ``provenance.where`` of every row at once (file name only: logs move between machines)
_WHERE = pl.concat_str(
    [pl.col("file").cast(pl.String).str.split("/").list.last(), pl.lit(":"),
     pl.col("line").cast(pl.String)]
).alias("where")  # fmt: skip


def rows_of(frame: pl.DataFrame) -> Iterator[Row]:
    """A frame of rebuild events (of the kinds in ``KINDS``) as rows, in its order."""
    if not frame.height:
        return iter(())
    frame = _fold_results(frame)
    kinds = frame["kind"].unique(maintain_order=True).to_list()
    if len(kinds) == 1:
        return iter(_rows(frame, ROW[kinds[0]]))
    out: list[Any] = [None] * frame.height  # every slot is set below
    numbered = frame.with_row_index("_row")
    for kind in kinds:
        part = numbered.filter(pl.col("kind") == kind)
        for i, row in zip(part["_row"].to_list(), _rows(part, ROW[kind]), strict=True):
            out[i] = row
    return iter(out)


def _fold_results(frame: pl.DataFrame) -> pl.DataFrame:
    """Result lines right after their check (same rid) onto the check's row."""
    if "decision" not in frame.columns or "rid" not in frame.columns:
        return frame.with_columns(pl.lit(False).alias("decided"))
    kind, rid = pl.col("kind"), pl.col("rid")
    follows = (kind == "adder_result") & (kind.shift(1) == "adder_check") & (rid == rid.shift(1))
    frame = frame.with_columns(follows.fill_null(False).alias("_folded"))
    decided = (kind == "adder_check") & pl.col("_folded").shift(-1).fill_null(False)
    frame = frame.with_columns(
        decided.alias("decided"),
        *(pl.when(decided).then(pl.col(c).shift(-1)).otherwise(pl.col(c)).alias(c)
          for c in DECIDED if c in frame.columns),
    )  # fmt: skip
    return frame.filter(~pl.col("_folded")).drop("_folded")


def _rows(frame: pl.DataFrame, row: type[Row]) -> list[Row]:
    cols = [
        _WHERE if f == "where" else pl.col(f) if f in frame.columns else pl.lit(None).alias(f)
        for f in row._fields
    ]
    # NOTE: tuple.__new__ straight from the zipped columns: the named tuple's own
    # ``__new__`` is a Python function, a call per event for the same tuple
    columns = (s.to_list() for s in frame.select(cols))
    # (typeshed types ``tuple.__new__`` unbound as a plain tuple's)
    return cast(list[Row], list(map(tuple.__new__, repeat(row), zip(*columns, strict=True))))
