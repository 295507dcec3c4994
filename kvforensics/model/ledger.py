"""The ledger: one row per step of the adder or the allocator, exportable as a DataFrame."""

from __future__ import annotations

import polars as pl

#: (column, dtype). Values that do not apply to a row's call are null.
COLUMNS: tuple[tuple[str, pl.DataType], ...] = (
    ("round", pl.Int64),
    ("step", pl.Int64),
    ("call", pl.Utf8),  # add_chunked_req | add_one_req | allocate
    ("rid", pl.Utf8),
    ("seq_len", pl.Int64),
    ("device_prefix", pl.Int64),
    ("host_hit", pl.Int64),
    ("baseline", pl.Int64),  # available + evictable when the step looked (after the lock)
    ("baseline_after", pl.Int64),
    ("total_offset_before", pl.Int64),
    ("total_offset_after", pl.Int64),
    ("cur_offset_before", pl.Int64),
    ("cur_offset_after", pl.Int64),
    ("rem_total_tokens", pl.Int64),  # at the memory check
    ("cur_rem_tokens", pl.Int64),
    ("rem_chunk_tokens", pl.Int64),
    ("rem_chunk_after", pl.Int64),
    ("decision", pl.Utf8),  # full | truncated | rejected | resumed
    ("start", pl.Int64),
    ("end", pl.Int64),
    ("load_back", pl.Int64),
    ("allocated", pl.Int64),  # slots taken (page-exact) by allocate rows
    ("budget_state", pl.Utf8),  # what the call returned: CONTINUE | NO_TOKEN | OTHER
    ("reserved_tail", pl.Int64),
    ("forced", pl.Boolean),  # add_chunked_req took rem_chunk_tokens because memory was gone
    ("reason", pl.Utf8),  # why a request was rejected, in words
)
NAMES = tuple(c for c, _ in COLUMNS)
INDEX = {c: i for i, c in enumerate(NAMES)}
SCHEMA = dict(COLUMNS)


class Ledger:
    """Rows appended in order; cheap enough to keep on in long simulations."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: list[tuple] = []

    def add(self, **values: object) -> None:
        self.rows.append(tuple(map(values.get, NAMES)))

    def step(
        self,
        round_no,
        step,
        call,
        req,
        budget,
        base,
        base_after,
        t0,
        c0,
        chunk0,
        decision,
        start,
        end,
        load_back,
        state,
        reserved,
        forced=None,
        reason=None,
    ) -> None:
        """The adder's hot path: one positional tuple, no keyword dict."""
        self.rows.append(
            (
                round_no,
                step,
                call,
                req.rid,
                req.seq_len,
                req.device_prefix,
                req.host_hit,
                base,
                base_after,
                t0,
                budget.total_offset,
                c0,
                budget.cur_offset,
                base - t0,
                base - c0,
                chunk0,
                budget.rem_chunk,
                decision,
                start,
                end,
                load_back,
                None,
                state,
                reserved,
                forced,
                reason,
            )
        )

    def __len__(self) -> int:
        return len(self.rows)

    def to_frame(self) -> pl.DataFrame:
        return pl.DataFrame(self.rows, schema=SCHEMA, orient="row")


def empty_frame() -> pl.DataFrame:
    return pl.DataFrame(schema=SCHEMA)
