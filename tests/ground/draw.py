"""Random worlds, and what each policy does in them.

A world is a node setting, a prefix cache to start from and an outside future: Poisson
arrivals of three kinds (agent turns that hit a large host cache, short chats that hit a
shared device prefix, long prompts with no hit), a KV transfer time per request, and in
about a third of worlds memory taken outside the adder for a while. ``play`` runs the
pre-fix fork from t=0 to its out-of-memory, then every policy from the start of the round
that first admitted the request the crash is pinned on, on the same future.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import random
from dataclasses import dataclass

from tests.ground.world import (
    POLICIES,
    Entry,
    Oom,
    Outside,
    RoundRec,
    Settings,
    Spec,
    World,
    floor_to,
    run,
)

# (page, align, chunk): the incident's, smaller and larger, and a page that is no power of two
SETTINGS = (
    (16, 128, 4096),
    (32, 256, 8192),
    (64, 256, 16384),
    (64, 512, 16384),
    (48, 384, 12288),
)
HORIZON_S = 400.0


@dataclass(frozen=True)
class Meta:
    """What was drawn, beyond the node's settings (for truth.json and the rendering)."""

    seed: int
    attempt: int
    setting: str
    transfer_base_s: float
    with_ms: bool
    outside: Outside | None


def _groups(rng: random.Random, prefix: str, n: int, lo: int, hi: int, page: int):
    return {f"{prefix}{i}": max(page, floor_to(rng.randint(lo, hi), page)) for i in range(n)}


def _specs(rng: random.Random, cfg: Settings, transfer_s: float, rid_rng: random.Random):
    """Poisson arrivals of the three kinds up to the horizon."""
    c, page = cfg.chunk, cfg.page
    agents = _groups(rng, "sys-agent-", 3, c // 4, c, page)
    chats = _groups(rng, "sys-chat-", 6, c // 20, c // 3, page)
    # faster transfers hold less KV in flight: more traffic keeps the pool as full
    busier = min(4.0, max(1.0, 3.0 / transfer_s))
    rates = {"agent": busier * rng.uniform(0.3, 0.9), "chat": busier * rng.uniform(0.5, 2.0),
             "long": rng.uniform(0.05, 0.2)}  # fmt: skip
    out: list[Spec] = []
    for kind, rate in rates.items():
        t = 0.0
        while True:
            t += rng.expovariate(rate)
            if t > HORIZON_S:
                break
            out.append(_one(rng, kind, t, cfg, agents, chats, transfer_s, rid_rng))
    out.sort(key=lambda s: s.at)
    return out, {**agents, **chats}


def _one(rng, kind, t, cfg: Settings, agents, chats, transfer_s, rid_rng) -> Spec:
    """One arrival: an agent turn resumes a context of up to a third of the pool from the
    host cache; a chat adds a little to a shared prefix; a long prompt hits nothing."""
    c, page, pool = cfg.chunk, cfg.page, cfg.pool
    jitter = transfer_s * rng.uniform(0.7, 1.3)
    rid = "as-" + "".join(rid_rng.choice("0123456789abcdefghijklmnopqrstuvwxyz") for _ in range(10))
    if kind == "agent":
        g = rng.choice(sorted(agents))
        ctx = floor_to(int(pool * rng.uniform(0.1, 0.6)), page)
        # most turns add a short tool result; some a long one
        new = rng.randint(1, 400) if rng.random() < 0.7 else rng.randint(400, max(401, c // 2))
        glen = agents[g]
        return Spec(rid, kind, t, glen + ctx + new, g, glen, glen + ctx, jitter)
    if kind == "chat":
        g = rng.choice(sorted(chats))
        glen = chats[g]
        new = rng.randint(16, 300) if rng.random() < 0.5 else rng.randint(300, c // 3)
        return Spec(rid, kind, t, glen + new, g, glen, glen, jitter)
    return Spec(rid, kind, t, rng.randint(3 * c // 2, min(6 * c, pool // 2)), None, 0, 0, jitter)


def draw(
    seed: int,
    attempt: int = 0,
    *,
    outside: bool | None = None,
    fast: bool | None = None,
    setting: int | None = None,
) -> tuple[World, Meta]:
    """A world at t=0 under ``prefix`` (without its outside allocation: ``place_outside``
    adds one once the run shows where a long request is between silent rounds)."""
    rng = random.Random(seed * 1000 + attempt)
    rid_rng = random.Random(seed * 7919 + attempt)
    name_i = rng.randrange(len(SETTINGS)) if setting is None else setting % len(SETTINGS)
    page, align, chunk = SETTINGS[name_i]
    pool = floor_to(int(chunk * rng.uniform(7, 12)), page)
    cfg = Settings(
        page, align, chunk, pool, chunk, overhead_s=rng.uniform(0.05, 0.3),
        tokens_per_s=rng.uniform(20000, 80000) * chunk / 16384, horizon_s=HORIZON_S,
    )  # fmt: skip
    fast = rng.random() < 0.5 if fast is None else fast
    transfer = rng.uniform(0.5, 1.5) if fast else rng.uniform(2.0, 5.0)
    specs, groups = _specs(rng, cfg, transfer, rid_rng)
    # the shared prefixes start in the device cache, evictable
    cache = {g: Entry(n // page, 0, i) for i, (g, n) in enumerate(sorted(groups.items()))}
    free = pool // page - sum(e.pages for e in cache.values())
    w = World(cfg, POLICIES["prefix"], free, cache, [])
    for i, s in enumerate(specs):
        heapq.heappush(w.future, (s.at, i, s))
    with_outside = rng.random() < 1 / 3 if outside is None else outside
    meta = Meta(
        seed, attempt, f"page {page}, align {align}, chunk {chunk}", round(transfer, 3),
        rng.random() < 0.5, Outside(-1.0, 0, 0.0) if with_outside else None,
    )  # fmt: skip
    return w, meta


def place_outside(w0: World, meta: Meta, rng: random.Random) -> tuple[World, Meta] | None:
    """Run the world without the outside allocation; put one between two silent rounds
    of a long chunked request (a resumed chunk that printed no adder line)."""
    probe = copy.deepcopy(w0)
    run(probe)
    gaps = [
        r.t_end
        for r, nxt in zip(probe.records, probe.records[1:], strict=False)
        if r.oom is None and _silent(r) and _silent(nxt) and r.t_end > 5.0
    ]
    if not gaps:
        return None
    at = rng.choice(gaps) - 1e-6
    ev = Outside(at, floor_to(rng.randint(36000, 62000), w0.cfg.page), rng.uniform(5.0, 30.0))
    w = copy.deepcopy(w0)
    heapq.heappush(w.future, (ev.at, -2, ev))
    return w, Meta(meta.seed, meta.attempt, meta.setting, meta.transfer_base_s, meta.with_ms, ev)


def _silent(r: RoundRec) -> bool:
    return bool(r.pieces) and all(s.call == "add_chunked_req" for s in r.steps)


@dataclass(frozen=True)
class PolicyRun:
    end: str  # oom | drained | horizon | stuck
    oom: Oom | None
    rounds: int


@dataclass(frozen=True)
class Played:
    """A world whose ``prefix`` run crashed, and what each policy does from the round
    that first admitted the request the crash is pinned on."""

    meta: Meta
    world: World  # the prefix run from t=0 to its out-of-memory (rendered as logs)
    victim: str
    start_round: int
    cause: str
    forced_resume: bool
    intruders: tuple[str, ...]
    outside_in_life: tuple[tuple[float, int], ...]
    policies: dict[str, PolicyRun]
    crash_piece_last: bool  # the piece that failed was the victim's last
    tags: tuple[str, ...]  # what in the log is hard to read (see ``tags``)
    in_flight: tuple[tuple[str, int, float], ...]  # KV transfers at the start round


def play(seed: int, *, max_attempts: int = 80, **fixed: bool | int | None) -> Played:
    """Draw until the pre-fix fork runs out of memory within the horizon; ``fixed`` pins
    what ``draw`` would otherwise draw (``outside``, ``fast``, ``setting``)."""
    for attempt in range(max_attempts):
        w0, meta = draw(seed, attempt, **fixed)
        if meta.outside is not None:
            placed = place_outside(w0, meta, random.Random(seed * 31 + attempt))
            if placed is None:
                continue
            w0, meta = placed
        w = copy.deepcopy(w0)
        if run(w) != "oom" or w.oom is None:
            continue
        return _counterfactuals(w0, w, meta)
    raise RuntimeError(f"seed {seed}: no out of memory in {max_attempts} worlds")


def _first_round(w: World, rid: str) -> int:
    return next(
        r.index
        for r in w.records
        for s in r.steps
        if s.rid == rid and s.call == "add_one_req" and s.decision != "rejected"
    )


def _counterfactuals(w0: World, w: World, meta: Meta) -> Played:
    """Every policy from the start of the victim's first round, on the same future: the
    same transfer times and outside allocation, and the same arrivals up to the crash
    (the question is what the crash's own traffic would have done under the fix)."""
    oom = w.oom
    assert oom is not None
    start = _first_round(w, oom.rid)
    crash_t = w.records[-1].t_start
    snap = copy.deepcopy(w0)
    run(snap, stop_after=start - 1)
    assert snap.next_round == start
    runs = {}
    for name, rules in POLICIES.items():
        s = copy.deepcopy(snap)
        s.rules = rules
        s.stop_arrivals_at = crash_t
        s.cfg = _longer(s.cfg, crash_t)
        end = run(s)
        runs[name] = PolicyRun(end, s.oom, s.next_round - start)
    cause, intruders, outside = _cause(w, start)
    step = next(s for s in w.records[-1].steps if s.rid == oom.rid)
    last = step.end >= step.seq_len
    return Played(
        meta, w, oom.rid, start, cause, oom.forced, intruders, outside, runs, last, tags(w),
        _in_flight(snap, w.records[start].t_start),
    )  # fmt: skip


def _in_flight(snap: World, t: float) -> tuple[tuple[str, int, float], ...]:
    """Requests whose KV is being sent as the start round begins: rid, slots held,
    seconds until the transfer ends."""
    w = copy.deepcopy(snap)
    w.happen_until(t)
    page = w.cfg.page
    return tuple(
        (req.rid, req.pages * page, round(end - t, 3)) for end, _r, req in sorted(w.inflight)
    )


def _longer(cfg: Settings, crash_t: float) -> Settings:
    """Room for the queue to drain after the crash time."""
    return Settings(
        cfg.page, cfg.align, cfg.chunk, cfg.pool, cfg.max_prefill, cfg.overhead_s,
        cfg.tokens_per_s, max(cfg.horizon_s, crash_t + 300.0),
    )  # fmt: skip


def _cause(w: World, start: int) -> tuple[str, tuple[str, ...], tuple[tuple[float, int], ...]]:
    """``external_allocation`` when memory was taken outside the adder after the victim's
    first round began and before the crash; else ``unreserved_tail`` when, in a round
    where the victim's piece was cut short, a request was admitted after it (through the
    chunk budget the cut left); else ``other``."""
    oom = w.oom
    assert oom is not None
    outside = tuple(
        (tk.at, tk.tokens) for tk in w.taken if start < tk.round_after <= oom.round and tk.tokens
    )
    intruders: list[str] = []
    for r in w.records[start : oom.round]:
        cut = [i for i, s in enumerate(r.steps) if s.rid == oom.rid and s.decision == "truncated"]
        if cut:
            intruders += [
                s.rid for s in r.steps[cut[0] + 1 :] if s.decision in ("full", "truncated")
            ]
    if outside:
        return "external_allocation", tuple(intruders), outside
    return ("unreserved_tail" if intruders else "other"), tuple(intruders), outside


def tags(w: World) -> tuple[str, ...]:
    """What a reader of the logs has to work out, per world:

    * ``outside``: memory taken outside the adder before the crash;
    * ``outside_unseen``: an outside allocation that took nothing before the crash
      (nothing was left to take, or it comes later): the logs cannot show it, yet a
      policy that runs longer or leaves more memory meets it;
    * ``outside_with_transfers``: memory taken outside the adder in the victim's life
      while KV transfers also ended: the logs show only the net of the two;
    * ``memory_back_in_silence``: a round that printed no adder line ran a piece larger
      than what the round before it left (a KV transfer ended in between: only the
      piece's size shows it);
    * ``memory_back_after_in_block``: the same, after a silent round whose piece
      completed no AttentionStore block (nothing but PP1/PP3 shows that round);
    * ``refused_lock_below``: the last request a round looked at was refused after
      locking its device prefix, so the printed baseline is lower by the lock (released
      again), and lower than what the round then allocated;
    * ``refused_lock_in_life``: such a refusal (below or not) in a round from the
      victim's first on, where the baseline a reader carries into the silent rounds
      that follow is low by the lock.
    """
    out = []
    if any(tk.tokens for tk in w.taken):
        out.append("outside")
    pending = any(isinstance(ev, Outside) for _t, _o, ev in w.future)
    if pending or any(not tk.tokens for tk in w.taken):
        out.append("outside_unseen")
    recs = w.records
    back = [
        (a, b)
        for a, b in itertools.pairwise(recs)
        if _silent(b) and _pages_of(b, w.cfg.page) > a.available + a.evictable
    ]
    if back:
        out.append("memory_back_in_silence")
    block = w.cfg.align or 256
    if any(_silent(a) and not _wrote(a, block) for a, _b in back):
        out.append("memory_back_after_in_block")
    start = _admitted_at(w)
    if start is not None and "outside" in out:
        t0, t1 = recs[start].t_start, recs[-1].t_start
        took = any(t0 < tk.at <= t1 and tk.tokens for tk in w.taken)
        if took and any(t0 < at <= t1 for at, _n in w.transfers_done):
            out.append("outside_with_transfers")
    refused = [r for r in recs if r.oom is None and _refused_lock(r)]
    if any(r.steps[-1].baseline < _pages_of(r, w.cfg.page) for r in refused):
        out.append("refused_lock_below")
    start = (
        next((r.index for r in recs for s in r.steps if s.rid == w.oom.rid), None)
        if w.oom
        else None
    )
    if start is not None and any(r.index >= start for r in refused):
        out.append("refused_lock_in_life")
    return tuple(out)


def _admitted_at(w: World) -> int | None:
    if w.oom is None:
        return None
    rid = w.oom.rid
    return next(
        (r.index for r in w.records for s in r.steps if s.rid == rid and s.decision != "rejected"),
        None,
    )


def _wrote(r: RoundRec, block: int) -> bool:
    """Some piece of the round completed an AttentionStore block (PP0 printed a write)."""
    return any(e // block > s // block for _r, s, e, _n in r.pieces)


def _refused_lock(r: RoundRec) -> bool:
    """The round's last check was refused after locking a device prefix (its printed
    baseline is lower by the lock, which was released again)."""
    return bool(r.pieces and r.steps[-1].decision == "rejected" and r.steps[-1].device_prefix)


def _pages_of(r: RoundRec, page: int) -> int:
    """Slots a round's batch allocates (a started page is reused)."""
    return sum((-(-e // page) - -(-s // page)) * page for _r, s, e, _n in r.pieces)
