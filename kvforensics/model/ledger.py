"""The ledger: one frozen record per step of the adder or the allocator.

A ``Step`` carries every number the step computed (the memory need, the piece's aligned
and unaligned end, whether it was forced, what was reserved, the books before and after),
so readers take fields by name and never recompute a rule. The ledger is the list of
those records; its DataFrame is a by-name projection of them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import polars as pl
from mypy_extensions import mypyc_attr


class Step(NamedTuple):
    """One step. Values that do not apply to a step's call are None.

    A named tuple rather than a dataclass: the adder makes one per call on its hot path,
    and a tuple row is what the DataFrame is built from.
    """

    round: int | None = None
    step: int | None = None
    call: str | None = None  # add_chunked_req | add_one_req | allocate
    rid: str | None = None
    seq_len: int | None = None
    device_prefix: int | None = None
    host_hit: int | None = None
    #: available + evictable when the step looked (after the lock)
    baseline: int | None = None
    baseline_after: int | None = None
    total_offset_before: int | None = None
    total_offset_after: int | None = None
    cur_offset_before: int | None = None
    cur_offset_after: int | None = None
    rem_total_tokens: int | None = None  # at the memory check
    cur_rem_tokens: int | None = None
    rem_chunk_tokens: int | None = None
    rem_chunk_after: int | None = None
    decision: str | None = None  # full | truncated | rejected | resumed
    start: int | None = None
    end: int | None = None
    load_back: int | None = None
    allocated: int | None = None  # slots taken (page-exact) by allocate steps
    budget_state: str | None = None  # what the call returned: CONTINUE | NO_TOKEN | OTHER
    reserved_tail: int | None = None
    #: add_chunked_req took rem_chunk_tokens because memory was gone (rem_total <= 0)
    forced: bool | None = None
    reason: str | None = None  # why a request was refused, in words
    #: what the memory check asked for (add_one_req)
    need: int | None = None
    #: where the piece would end without the checkpoint alignment
    unaligned_end: int | None = None
    #: pages + first token of the tail a truncation left for later rounds (what the fix
    #: reserves; under other policies what went unreserved)
    tail_need: int | None = None
    rem_input_tokens: int | None = None
    rem_input_after: int | None = None


#: a record from its values in field order (hot paths: no keyword matching)
from_values = partial(tuple.__new__, Step)
#: the fields between ``baseline_after`` and ``start`` (the adder's books: none for an
#: allocation)
_NO_BOOKS = (None,) * 9


def allocation(
    round: int, step: int, rid: str, start: int, end: int, allocated: int, before: int, after: int
) -> Step:
    """An ``allocate`` step: slots for [start, end) of ``rid``, the baseline around the batch."""
    return from_values(
        (round, step, "allocate", rid, None, None, None, before, after, *_NO_BOOKS, start, end,
         None, allocated, None, None, None, None, None, None, None, None, None)
    )  # fmt: skip


_DTYPES: dict[str, type[pl.DataType]] = {
    "call": pl.Utf8,
    "rid": pl.Utf8,
    "decision": pl.Utf8,
    "budget_state": pl.Utf8,
    "reason": pl.Utf8,
    "forced": pl.Boolean,
}
NAMES: tuple[str, ...] = Step._fields
#: (column, dtype) in record order
COLUMNS: tuple[tuple[str, type[pl.DataType]], ...] = tuple((c, _DTYPES.get(c, pl.Int64)) for c in NAMES)
SCHEMA = dict(COLUMNS)
#: columns added after ledger files were first written: a file without them still reads
LATER = ("need", "unaligned_end", "tail_need", "rem_input_tokens", "rem_input_after")


@mypyc_attr(allow_interpreted_subclasses=True)  # a subclass's ``add`` sees every step
class Ledger:
    """Steps appended in order; cheap enough to keep on in long simulations."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: list[Step] = []

    def add(self, step: Step) -> None:
        self.rows.append(step)

    def __len__(self) -> int:
        return len(self.rows)

    def to_frame(self) -> pl.DataFrame:
        return pl.DataFrame(self.rows, schema=SCHEMA, orient="row")


def appender(ledger: Ledger | None) -> Callable[[Step], None] | None:
    """The quickest way to add a step to ``ledger`` (None: no ledger): a plain ledger's list
    append; the ``add`` of a subclass that overrides it, so that it sees every step (the
    conformance harness records through one)."""
    if ledger is None:
        return None
    return ledger.rows.append if type(ledger).add is Ledger.add else ledger.add


def empty_frame() -> pl.DataFrame:
    return pl.DataFrame(schema=SCHEMA)
