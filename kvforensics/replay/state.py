"""Rebuilt round -> a model node in the same state (observed baselines win)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from kvforensics.model import (
    Config,
    Inflight,
    NodeState,
    PrefillNode,
    Request,
    Timing,
    get_policy,
)
from kvforensics.model.node import start_node
from kvforensics.model.profiles import FORK, Profile
from kvforensics.model.sizing import ceil_page
from kvforensics.replay.arrivals import Shown
from kvforensics.rounds import Round
from kvforensics.rounds.records import Piece


class Sizes(Protocol):
    """What a node at a round needs besides the round: the sizes and the prompt lengths
    (a ``Rebuild``, or a streamed replay's ``checks.Known``)."""

    @property
    def cfg(self) -> Config: ...

    @property
    def seq_lens(self) -> dict[str, int]: ...


#: a node whose rounds take no time (a re-run of one round)
_UNTIMED = Timing()


def lock_drops(rnd: Round, rb_cfg: Config) -> dict[str, int]:
    """Baseline drops between consecutive checks that no load-back explains: the lock of
    that request's device prefix took it out of the evictable cache."""
    ds = rnd.decisions
    # the first check's lock, where its line shows one (taken before the line, after the
    # resumed chunk was sized)
    lock = rnd.first_lock.value if rnd.first_lock is not None else None
    drops: dict[str, int] = {ds[0].rid: lock} if ds and lock else {}
    if len(ds) < 2:
        return drops
    for prev, d in itertools.pairwise(ds):
        expected = prev.baseline - prev.load_back_slots(rb_cfg)
        if d.baseline < expected and d.prefix_len:
            drops[d.rid] = expected - d.baseline
    return drops


def arrivals_after(
    shown: Sequence[Shown], start: Round, per_round: float, start_time: float = 0.0
) -> list[Request]:
    """The requests first shown after ``start``, as arrivals on the node's clock: round
    ``start + k`` begins ``k`` rounds of ``per_round`` seconds after ``start_time``, and
    each request arrives half a round before the round that first shows it (so that under
    ``prefix`` it waits in the queue by that round and not in the round before)."""
    half = start.index + 0.5
    at = [start_time + (s.round - half) * per_round for s in shown]
    return [
        Request(s.rid, s.seq_len, s.prefix_len, s.host_hit_len, arrival=t)
        for s, t in zip(shown, at, strict=True)
    ]


def resumed(rnd: Round) -> Piece | None:
    """The piece of the request ``rnd`` resumes (the adder chunks one at a time)."""
    return next((p for p in rnd.pieces if p.kind == "resumed"), None)


def chunk_slots(cfg: Config, rnd: Round) -> int:
    """The slots the request ``rnd`` resumes holds when the round starts (its computed
    part, whole pages): outside the round's baseline, like the KV in transfer."""
    p = resumed(rnd)
    return _held(cfg, p) if p is not None else 0


def _held(cfg: Config, p: Piece) -> int:
    """The slots resumed piece ``p``'s request holds when its round starts."""
    return ceil_page(p.start, cfg.page_size)  # ``cfg.ceil_page``, called compiled


def shared_slots(cfg: Config, rnd: Round) -> int:
    """The cached prefix slots another request had already locked when ``rnd`` began (the
    part of a lock that did not drop the baseline): outside the baseline, and held by the
    node as locked cache, not as KV in transfer."""
    return sum(_shared(rnd, lock_drops(rnd, cfg)).values())


def _shared(rnd: Round, drops: dict[str, int]) -> dict[str, int]:
    """rid -> the part of its device prefix an earlier request had already locked (its
    lock dropped the baseline by less than the prefix: shared blocks)."""
    return {
        d.rid: d.prefix_len - drops[d.rid]
        for d in rnd.decisions
        if d.rid in drops and d.prefix_len > drops[d.rid]
    }


@dataclass(frozen=True, slots=True)
class Eviction:
    """Cache the logs show evicted: ``rid``'s check in ``round`` (``where``) finds a
    device prefix of ``shown`` tokens where its check at the start round found
    ``before``; its entry ``key`` is cut to ``keep`` tokens just before that round."""

    round: int
    rid: str
    key: str
    keep: int
    before: int
    shown: int
    where: str

    def sentence(self) -> str:
        return (
            f"{self.before - self.shown} tokens of {self.rid}'s cached prefix left the device "
            f"before round {self.round} (observed: its check there ({self.where}) shows a "
            f"device prefix of {self.shown}, where the start round's showed {self.before}); "
            "evicted there under every policy"
        )


def observed_evictions(start: Round, later: Iterable[Round], cfg: Config) -> tuple[Eviction, ...]:
    """The cache entries the logs show evicted after ``start``: a request whose lock at
    ``start`` took a prefix out of the evictable cache (its entry ``prefix:<rid>``, the part
    no other request held) is checked again later with a shorter device prefix, so that
    much of the entry had left the device by then. The model evicts only for its own
    allocations; this is an eviction something it does not see made (an outside
    allocation, a finished transfer's cache pushing it out)."""
    drops = lock_drops(start, cfg)
    if not drops:
        return ()
    shared = _shared(start, drops)
    least = {d.rid: d.prefix_len for d in start.decisions if d.rid in drops}
    out: list[Eviction] = []
    for rnd in later:
        for d in rnd.decisions:
            shown = least.get(d.rid)
            if shown is None or d.prefix_len >= shown:
                continue
            least[d.rid] = d.prefix_len
            # the shared part is the prefix's head (another request holds it): the entry
            # is the tail, and the tail goes first
            keep = max(0, d.prefix_len - shared.get(d.rid, 0))
            out.append(Eviction(rnd.index, d.rid, f"prefix:{d.rid}", keep, shown,
                                d.prefix_len, d.where))  # fmt: skip
    return tuple(out)


def eviction_schedule(evictions: Iterable[Eviction]) -> dict[int, tuple[tuple[str, int], ...]]:
    """round -> the (key, tokens kept) a node cuts before that round."""
    out: dict[int, list[tuple[str, int]]] = {}
    for e in evictions:
        out.setdefault(e.round, []).append((e.key, e.keep))
    return {r: tuple(v) for r, v in out.items()}


def node_at(
    rb: Sizes,
    rnd: Round,
    policy: str,
    *,
    extra_waiting: Sequence[Request] = (),
    arrivals: Sequence[Request] = (),
    inflight: Sequence[tuple[str, int, float]] = (),
    timing: Timing | None = None,
    start_time: float = 0.0,
    outside: dict[int, int] | None = None,
    unevictable: int = 0,
    swa_pool_size: int | None = None,
    profile: Profile = FORK,
    ops: bool = True,
    record: bool = True,
    hold_until: float = float("-inf"),
    evictions: dict[int, tuple[tuple[str, int], ...]] | None = None,
) -> PrefillNode:
    """A node at the start of ``rnd``: its baseline, its chunked request, its queue, the
    requests that join it later (``arrivals``) (``swa_pool_size``: an SWA pool the logs
    show, not in the startup lines; ``ops``: keep the pool's op log, which only a run that
    ``exec`` may replay needs; ``record``: keep the ledger; ``hold_until``: no KV transfer
    ends on the clock before this time; ``evictions``: ``observed_evictions``)."""
    cfg: Config = rb.cfg
    if swa_pool_size is not None:
        cfg = cfg.with_(swa_pool_size=swa_pool_size)
    drops = lock_drops(rnd, cfg)
    # the round starts before the first check's lock: its line shows the baseline after it
    base = (rnd.baseline.value if rnd.baseline and rnd.baseline.value is not None else 0) + (
        rnd.first_lock.value if rnd.first_lock and rnd.first_lock.value else 0
    )
    waiting = [Request(d.rid, d.seq_len, d.prefix_len, d.host_hit_len) for d in rnd.decisions]
    evictable, locked = _prefix_locks(rnd, drops, waiting) if drops else ((), ())
    waiting.extend(extra_waiting)
    chunked = None
    held: list[tuple[str, int]] = []
    p = resumed(rnd)
    if p is not None:
        chunked = Request(p.rid, rb.seq_lens.get(p.rid, p.end), 0, 0)
        chunked.done = p.start
        chunked.admitted_round = rnd.index - 1
        held.append((p.rid, _held(cfg, p)))
    if inflight:
        held += [(rid, tokens) for rid, tokens, _done_at in inflight]
    # by position, in NodeState's field order: a named tuple's keywords are matched at
    # run time, once for every round a replay re-runs
    state = NodeState(
        max(0, base - sum(drops.values()) - unevictable),  # free
        evictable,
        locked,
        tuple(held),
        tuple(waiting),
        chunked,
        tuple(Inflight(rid, done_at) for rid, _, done_at in inflight) if inflight else (),
        rnd.index,  # first_round
        start_time,
        min(unevictable, base),  # unevictable
    )
    # ``start_node``: a plain function, a direct call, compiled
    return start_node(
        cfg, get_policy(policy), state, arrivals=arrivals, timing=timing or _UNTIMED,
        outside=outside, profile=profile, ops=ops, record=record, hold_until=hold_until,
        evictions=evictions,
    )  # fmt: skip


def _prefix_locks(
    rnd: Round, drops: dict[str, int], waiting: list[Request]
) -> tuple[tuple[tuple[str, int], ...], tuple[str, ...]]:
    """The cache entries of the prefixes whose lock dropped the baseline (evictable until
    their request locks them), and the entries already locked by earlier requests; the
    requests in ``waiting`` get their keys."""
    evictable = {f"prefix:{rid}": n for rid, n in drops.items()}
    # The rest of such a prefix was already locked by an earlier request (shared blocks):
    # cached, but not evictable.
    shared = _shared(rnd, drops)
    evictable.update({f"shared:{rid}": n for rid, n in shared.items()})
    for req in waiting:
        if req.rid in drops:
            req.prefix_keys = (f"prefix:{req.rid}",) + (
                (f"shared:{req.rid}",) if req.rid in shared else ()
            )
    return tuple(evictable.items()), tuple(f"shared:{rid}" for rid in shared)
