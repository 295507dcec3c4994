"""Other ranks' batch lines by time, for the silent rounds whose AttentionStore write
leaves the piece's end open: compact arrays sorted by time, looked up by bisection.

A PP3 log prints one batch line a round, so a scan of every line per silent round makes
the rebuild quadratic in the log; a few dozen bytes a line in arrays (no dict per line)
keep the index small beside the log.
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

    @classmethod
    def of(cls, events: pl.DataFrame, deciding: str) -> BatchSizes:
        """The batch lines of every rank but ``deciding`` that carry a time and a size."""
        out = cls()
        if "new_token" not in events.columns or not events.height:
            return out
        lines = events.filter(
            (pl.col("kind") == "prefill_batch")
            & (pl.col("rank") != deciding)
            & pl.col("new_token").is_not_null()
        ).select("file", "line", "time", "new_token")
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
        return out

    def __len__(self) -> int:
        return len(self._time)

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
