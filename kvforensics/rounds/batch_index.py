"""Other ranks' batch lines (and the fork's PP plan lines) by time, for the silent rounds
whose AttentionStore write leaves the piece's end open, or sizes a piece other than the
one the assumed baseline gives: compact arrays sorted by time, looked up by bisection.

A PP3 log prints one batch line a round, so a scan of every line per silent round makes
the rebuild quadratic in the log; a few dozen bytes a line in arrays (no dict per line)
keep the index small beside the log.

One line a round is also what pins a silent round to its line: once a round whose pieces
the logs show is seated on the line that prints its size, the next round's line is that
rank's next one. Time alone cannot tell two rounds apart where the timestamps resolve one
second and a node runs several rounds in it.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from datetime import datetime

import polars as pl

from kvforensics.rounds.compact import pack_time

#: seconds between a silent round and another rank's batch line about it, at most
NEAR_BATCH_S = 5
_NEAR_US = NEAR_BATCH_S * 1_000_000


class BatchSizes:
    """``#new-token`` of other ranks' batch lines, with where each was printed, sorted by
    time (lines of one time keep their order in the logs)."""

    def __init__(self) -> None:
        self._time = array("q")  # microseconds since 1970
        self._tokens = array("q")
        self._line = array("q")
        self._file = array("l")  # position in ``_files``
        self._order = array("q")  # position in the logs' order (file by file, line by line)
        self._files: list[str] = []
        #: per rank: its lines' times and their positions in the arrays above, in order
        self._rank_time: list[array[int]] = []
        self._rank_at: list[array[int]] = []
        #: per rank: the position (in its own lines) of the line of the last round that
        #: ran, where it is known; None where the rounds and the lines are not seated
        self._seat: list[int | None] = []

    @classmethod
    def of(cls, events: pl.DataFrame, deciding: str) -> BatchSizes:
        """The batch lines of every rank but ``deciding`` that carry a time and a size,
        and the fork's PP plan lines (``extend_tokens``: one a round, like a batch line),
        each plan rank a source of its own: where two sources print different sizes for
        one round, neither decides it."""
        out = cls()
        if not events.height or "kind" not in events.columns:
            return out
        cols = ("file", "line", "time", "new_token", "rank")
        parts = []
        if "new_token" in events.columns:
            parts.append(events.filter(
                (pl.col("kind") == "prefill_batch")
                & (pl.col("rank") != deciding)
                & pl.col("new_token").is_not_null()
            ).select(*cols))  # fmt: skip
        if "extend_tokens" in events.columns:
            parts.append(events.filter(
                (pl.col("kind") == "replay_plan")
                & (pl.col("rank") != deciding)
                & (pl.col("extend_tokens") > 0)
            ).select(
                "file", "line", "time", pl.col("extend_tokens").alias("new_token"),
                (pl.col("rank").cast(pl.String) + " plan").alias("rank"),
            ))  # fmt: skip
        if not parts:
            return out
        lines = pl.concat(
            [p.with_columns(pl.col("rank").cast(pl.String), pl.col("new_token").cast(pl.Int64))
             for p in parts], how="vertical_relaxed",
        )  # fmt: skip
        lines = lines.with_row_index("order").filter(pl.col("time").is_not_null())
        if not lines.height:
            return out
        lines = lines.sort("time", maintain_order=True)
        # file name only: logs move between machines (as ``provenance.where`` says)
        names = lines["file"].cast(pl.String).str.split("/").list.last()
        files = names.unique(maintain_order=True)
        out._files = files.to_list()
        out._file = array("l", names.replace_strict(files, range(len(files))).to_list())
        out._time = array("q", map(pack_time, lines["time"].to_list()))
        out._tokens = array("q", lines["new_token"].to_list())
        out._line = array("q", lines["line"].to_list())
        out._order = array("q", lines["order"].to_list())
        ranks = lines["rank"].cast(pl.String).fill_null("").to_list()
        for rank in dict.fromkeys(ranks):
            at = array("q", (i for i, r in enumerate(ranks) if r == rank))
            out._rank_at.append(at)
            out._rank_time.append(array("q", (out._time[i] for i in at)))
            out._seat.append(None)
        return out

    def __len__(self) -> int:
        return len(self._time)

    def ran(self, time: datetime | None, tokens: int, *, shown: bool) -> None:
        """A round ran at ``time`` with ``tokens`` new tokens: seat it on each rank's
        next line. Where that line prints another size and the logs show the round's
        pieces (``shown``), the one line near ``time`` that prints ``tokens`` seats it (a
        rank that skipped or cut lines); a round the rebuild sized itself only moves on."""
        t = None if time is None else pack_time(time)
        for k, at in enumerate(self._rank_at):
            nxt = self._next(k, t, 0)
            if nxt is not None and self._tokens[at[nxt]] == tokens:
                self._seat[k] = nxt
            elif shown:
                self._seat[k] = self._only(k, t, tokens)
            else:
                self._seat[k] = nxt

    def _next(self, k: int, t: int | None, ahead: int) -> int | None:
        """Rank ``k``'s line ``ahead`` rounds past the next one, where the rounds are
        seated and the line is near ``t``."""
        seat = self._seat[k]
        if seat is None or t is None:
            return None
        nxt = seat + 1 + ahead
        times = self._rank_time[k]
        return nxt if nxt < len(times) and abs(times[nxt] - t) <= _NEAR_US else None

    def _only(self, k: int, t: int | None, tokens: int) -> int | None:
        """The one line of rank ``k`` near ``t`` that prints ``tokens``, else None."""
        if t is None:
            return None
        times, at = self._rank_time[k], self._rank_at[k]
        hits = [j for j in range(bisect_left(times, t - _NEAR_US), bisect_right(times, t + _NEAR_US))
                if self._tokens[at[j]] == tokens]  # fmt: skip
        return hits[0] if len(hits) == 1 else None

    def size(
        self, time: datetime | None, least: int, most: int, ahead: int = 0, *, near: bool = True
    ) -> tuple[int, str] | None:
        """The ``#new-token`` in [least, most] of the round ``ahead`` rounds past the next
        one: the seated ranks' line for it, where any rank is seated (None where it prints
        another size, or they disagree); else (``near``) the one such size near ``time``."""
        t = None if time is None else pack_time(time)
        said = {}
        for k, at in enumerate(self._rank_at):
            j = self._next(k, t, ahead)
            if j is not None:
                said[self._tokens[at[j]]] = at[j]
        if not said:
            return self.near(time, least, most) if near else None
        if len(said) > 1:
            return None
        ((v, i),) = said.items()
        return (v, f"{self._files[self._file[i]]}:{self._line[i]}") if least <= v <= most else None

    def near(self, time: datetime | None, least: int, most: int) -> tuple[int, str] | None:
        """The one ``#new-token`` in [least, most] that the lines within ``NEAR_BATCH_S`` of
        ``time`` print, with where (the last such line in the logs' order); None when
        none does, or they disagree."""
        if time is None or not self._time:
            return None
        t = pack_time(time)
        lo = bisect_left(self._time, t - _NEAR_US)
        hi = bisect_right(self._time, t + _NEAR_US)
        found, last = None, -1
        for i in range(lo, hi):
            v = self._tokens[i]
            if not least <= v <= most:
                continue
            if found is not None and v != found:
                return None
            found = v
            if last < 0 or self._order[i] > self._order[last]:
                last = i
        if found is None:
            return None
        return found, f"{self._files[self._file[last]]}:{self._line[last]}"
