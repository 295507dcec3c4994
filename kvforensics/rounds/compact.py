"""A round's time as one 64-bit integer (microseconds since 1970), for the arrays that
stand in for rounds a streamed replay does not keep."""

from __future__ import annotations

from datetime import datetime, timedelta

_EPOCH = datetime(1970, 1, 1)
_US = timedelta(microseconds=1)
#: no time
NONE = -(2**63)


def pack_time(t: datetime | None) -> int:
    return NONE if t is None else (t - _EPOCH) // _US


def unpack_time(v: int) -> datetime | None:
    return None if v == NONE else _EPOCH + timedelta(microseconds=v)
