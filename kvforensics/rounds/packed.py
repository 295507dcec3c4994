"""A rebuilt round as plain values, for a round that crosses a process boundary (the
byte-range join, ``replay/ranges.py``): tuples, lists, strings and integers only, which
``marshal`` writes and reads in a fraction of the time pickle takes for the objects.

The layout follows the records' own fields (``records.py``), so a field added there
travels without a change here. The round's time is packed as an integer (``compact``);
its out-of-memory line, the one object a round may hold that marshal does not take,
travels beside it (``unpack``'s ``oom``).
"""

from __future__ import annotations

import dataclasses
from operator import attrgetter
from typing import Any

from kvforensics.rounds.compact import pack_time, unpack_time
from kvforensics.rounds.provenance import Prov
from kvforensics.rounds.records import BatchLine, Decision, LoggedOom, Piece, PlanReplay, Round

_DECISION = attrgetter(*Decision.__dataclass_fields__)
_PIECE = attrgetter(*Piece.__dataclass_fields__)
_BATCH = attrgetter(*BatchLine.__dataclass_fields__)
_REPLAY = attrgetter(*PlanReplay.__dataclass_fields__)
#: where the evidence sits in a packed decision and a packed piece (``light``)
_WHERE = tuple(Decision.__dataclass_fields__).index("where")
_EVIDENCE = tuple(Piece.__dataclass_fields__).index("evidence")


def _pack_prov(p: Prov | None) -> tuple[Any, ...] | None:
    return None if p is None else (p.value, p.provenance, p.evidence, p.interval)


def _unpack_prov(t: tuple[Any, ...] | None) -> Prov | None:
    return None if t is None else Prov(*t)


def _light_prov(t: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    return None if t is None else (t[0], t[1], [], t[3])


def pack(rnd: Round) -> tuple[Any, ...]:
    """``rnd`` as plain values, without its out-of-memory line (None in its place)."""
    return (
        rnd.index, pack_time(rnd.time), [_DECISION(d) for d in rnd.decisions],
        [_PIECE(p) for p in rnd.pieces], rnd.as_writes, _pack_prov(rnd.baseline),
        _pack_prov(rnd.baseline_end), rnd.forwarded, None,
        None if rnd.batch is None else _BATCH(rnd.batch), [_REPLAY(x) for x in rnd.replays],
        _pack_prov(rnd.first_lock),
    )  # fmt: skip


def light(t: tuple[Any, ...]) -> tuple[Any, ...]:
    """A packed round without its evidence (file:line and rule texts), for a round that
    is only counted on the other side, never shown."""
    index, time, decisions, pieces, _, base, base_end, fwd, oom, batch, replays, lock = t
    w, e = _WHERE, _EVIDENCE
    decisions = [(*d[:w], "", *d[w + 1 :]) for d in decisions]
    pieces = [(*p[:e], [], *p[e + 1 :]) for p in pieces]
    return (
        index, time, decisions, pieces, [], _light_prov(base), _light_prov(base_end), fwd, oom,
        batch, replays, _light_prov(lock),
    )  # fmt: skip


def unpack(t: tuple[Any, ...], shift: int = 0, oom: LoggedOom | None = None) -> Round:
    """``pack``'s round again, numbered ``shift`` later, with its out-of-memory line."""
    index, time, decisions, pieces, writes, base, base_end, fwd, _, batch, replays, lock = t
    if oom is not None and oom.round is not None and shift:
        oom = dataclasses.replace(oom, round=oom.round + shift)
    return Round(
        index + shift, unpack_time(time), [Decision(*d) for d in decisions],
        [Piece(*p) for p in pieces], writes, _unpack_prov(base), _unpack_prov(base_end),
        first_lock=_unpack_prov(lock), forwarded=fwd, oom=oom,
        batch=None if batch is None else BatchLine(*batch),
        replays=[PlanReplay(*x) for x in replays],
    )  # fmt: skip
