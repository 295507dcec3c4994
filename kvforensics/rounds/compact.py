"""A round's time as one 64-bit integer (microseconds since 1970), and the spooled
columns of such numbers that stand in for the rounds a streamed replay does not keep."""

from __future__ import annotations

import math
import os
import sys
import tempfile
import weakref
from array import array
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import IO, Any

from mypy_extensions import mypyc_attr

_EPOCH = datetime(1970, 1, 1)
_US = timedelta(microseconds=1)
#: no time
NONE = -(2**63)


#: the last time packed and its number: the rounds of a second share one time, and a
#: round's time is packed by several stages in turn (one tuple, replaced whole, so that a
#: thread never reads one time with another's number)
_last: tuple[datetime | None, int] = (None, NONE)


def pack_time(t: datetime | None) -> int:
    global _last
    if t is None:
        return NONE
    last = _last
    if t == last[0]:
        return last[1]
    v = (t - _EPOCH) // _US
    _last = (t, v)
    return v


def unpack_time(v: int) -> datetime | None:
    return None if v == NONE else _EPOCH + timedelta(microseconds=v)


#: rows a ``Spool`` holds in memory before it writes them out
CHUNK = 1 << 16
#: rows pushed as tuples before they join the columns (at most; a divisor of the chunk)
STEP = 1 << 10


# a plain Python class when compiled: the finalizer that closes the file needs a weak
# reference to the spool, which mypyc's native classes do not take
@mypyc_attr(native_class=False)
class Spool:
    """Rows of fixed-width numbers (one ``array`` typecode a column) appended as rounds
    stream by and read back in order once the stream has ended. All but the last
    ``chunk`` rows go to an unnamed temporary file, so the memory they take does not grow
    with the log (a 2 GB log has over two million rounds). Where no temporary file can be
    made the rows stay in memory."""

    def __init__(self, codes: str, chunk: int | None = None) -> None:
        self.codes, self.chunk = codes, chunk or CHUNK
        # NOTE: the step divides the chunk, so the columns reach it exactly
        self._step = math.gcd(self.chunk, STEP)
        # a tuple append is cheaper than an array's per column
        self._pending: list[tuple[float, ...]] = []
        self._cols = self._empty()
        self._file: IO[bytes] | None = None
        self._written = 0  # rows in the file, in blocks of ``chunk``
        self._width = sum(col.itemsize for col in self._cols)

    def _empty(self) -> tuple[array[Any], ...]:
        return tuple(array(c) for c in self.codes)

    def __len__(self) -> int:
        return self._written + len(self._cols[0]) + len(self._pending)

    @property
    def held(self) -> int:
        """Rows held in memory (fewer than ``chunk`` once a file takes the rest)."""
        return len(self._cols[0]) + len(self._pending)

    def push(self, *row: float) -> None:
        pending = self._pending
        pending.append(row)
        if len(pending) >= self._step:
            self._settle()

    def _settle(self) -> None:
        """The pending rows into the columns (written out once they hold a chunk)."""
        if not self._pending:
            return
        for col, values in zip(self._cols, zip(*self._pending, strict=True), strict=True):
            col.extend(values)
        self._pending.clear()
        if len(self._cols[0]) >= self.chunk:
            self._spill()

    def _spill(self) -> None:
        if self._file is None:
            try:
                # held as long as the spool: closed by the finalizer below
                self._file = tempfile.TemporaryFile(prefix="kvforensics-")  # noqa: SIM115
            except OSError:
                self.chunk = sys.maxsize  # nowhere to write: keep them
                return
            weakref.finalize(self, self._file.close)
        self._file.seek(0, os.SEEK_END)
        for col in self._cols:
            col.tofile(self._file)
        self._written += len(self._cols[0])
        self._cols = self._empty()

    def chunks(self) -> Iterator[tuple[array[Any], ...]]:
        """The rows in order, a block of columns at a time."""
        self._settle()
        for k in range(self._written // self.chunk):
            assert self._file is not None  # rows were written to it
            self._file.seek(k * self.chunk * self._width)
            cols = self._empty()
            for col in cols:
                col.fromfile(self._file, self.chunk)
            yield cols
        if len(self._cols[0]):
            yield self._cols

    def rows(self) -> Iterator[tuple[Any, ...]]:
        for cols in self.chunks():
            yield from zip(*cols, strict=True)
