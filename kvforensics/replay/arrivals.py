"""Requests the log first shows after a round: the arrivals a forward run from that round
must replay (a fact of the world, like an outside allocation), gathered as the rounds
stream by, for each request still being chunked (a forward run may start at its first
truncation), and forgotten with it."""

from __future__ import annotations

from typing import NamedTuple

from kvforensics.rounds import Round


class Shown(NamedTuple):
    """A request's first adder check after the start round: where, and its lengths (a
    named tuple: one is made for every request a log shows while a truncation is open)."""

    rid: str
    round: int
    seq_len: int
    prefix_len: int
    host_hit_len: int


class Arrivals:
    """rid first truncated -> the requests the log first shows in the rounds since."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[set[str], list[Shown]]] = {}

    def add(self, rnd: Round) -> None:
        """A round after the open truncations: the requests it shows for the first time."""
        for seen, shown in self._open.values():
            for d in rnd.decisions:
                if d.rid not in seen:
                    seen.add(d.rid)
                    shown.append(Shown(d.rid, rnd.index, d.seq_len, d.prefix_len, d.host_hit_len))

    def open(self, rid: str, rnd: Round) -> None:
        """``rid`` was first truncated in ``rnd``: what that round shows is its queue. The
        adder chunks one request at a time, so one that has no piece here is no longer
        being chunked (its last piece went unlogged): its list would only grow."""
        seen = {d.rid for d in rnd.decisions} | {p.rid for p in rnd.pieces}
        for other in set(self._open) - seen:
            del self._open[other]
        self._open[rid] = (seen, [])

    def close(self, rid: str) -> None:
        self._open.pop(rid, None)

    def since(self, rid: str) -> list[Shown]:
        """The requests first shown after ``rid``'s first truncation, in order."""
        got = self._open.get(rid)
        return list(got[1]) if got else []
