"""The node's rules and its event loop.

A PD prefill node: a paged KV pool, a device prefix cache whose unlocked entries are
evictable, a host cache that loads back at admission, chunked prefill with the fork's
checkpoint end alignment, and a per-round admission (the ``PrefillAdder``) followed by the
allocation of the whole batch. Finished requests hold their KV while it is sent to decode
and then leave it as evictable cache. The clock moves with rounds (overhead plus tokens
over a rate) and with outside events: arrivals, ends of KV transfers, and memory taken
outside the adder.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

CONTINUE, OTHER, NO_TOKEN = "CONTINUE", "OTHER", "NO_TOKEN"


@dataclass(frozen=True)
class Settings:
    page: int
    align: int  # checkpoint end align of non-last pieces (the fork); 0: none
    chunk: int  # chunked_prefill_size
    pool: int  # max_total_num_tokens, a whole number of pages
    max_prefill: int
    overhead_s: float  # a round's fixed cost
    tokens_per_s: float  # a round's compute rate
    horizon_s: float  # the clock stops here


@dataclass(frozen=True)
class Rules:
    """What a policy changes: alignment, reserving the tail, ending the round after a
    truncation, and parking a resumed chunk that finds no memory."""

    name: str
    aligned: bool
    reserve_tail: bool
    drain: bool
    park: bool


POLICIES = {
    "prefix": Rules("prefix", aligned=True, reserve_tail=False, drain=False, park=False),
    "upstream": Rules("upstream", aligned=False, reserve_tail=False, drain=False, park=False),
    "fixed": Rules("fixed", aligned=True, reserve_tail=True, drain=False, park=False),
    "drain": Rules("drain", aligned=True, reserve_tail=False, drain=True, park=False),
    "park": Rules("park", aligned=True, reserve_tail=True, drain=False, park=True),
}


@dataclass(frozen=True)
class Spec:
    """A request as it arrives. ``cached`` tokens of the prompt (a page multiple) are in
    the host cache; the first ``group_len`` of them are a prefix shared by ``group``,
    which the device cache may also hold."""

    rid: str
    kind: str
    at: float
    seq_len: int
    group: str | None
    group_len: int
    cached: int
    transfer_s: float


@dataclass(frozen=True)
class Outside:
    """Memory taken outside the adder at ``at`` for ``hold_s`` seconds."""

    at: float
    tokens: int
    hold_s: float


@dataclass
class Req:
    spec: Spec
    device_prefix: int = 0
    host_hit: int = 0
    done: int = 0  # end of the last piece allocated
    pages: int = 0  # pages the request holds itself (not its locked prefix)
    locked: str | None = None

    @property
    def rid(self) -> str:
        return self.spec.rid


@dataclass
class Entry:
    pages: int
    locks: int = 0
    used: int = 0


@dataclass(frozen=True)
class Step:
    """One adder call, with the numbers the fork's lines print."""

    call: str  # add_one_req | add_chunked_req
    rid: str
    seq_len: int
    device_prefix: int
    host_hit: int
    rem_chunk: int
    baseline: int
    rem_total: int
    cur_rem: int
    decision: str  # full | truncated | rejected | parked
    start: int
    end: int
    result: str
    rem_chunk_after: int
    forced: bool = False


@dataclass(frozen=True)
class Oom:
    round: int
    rid: str
    tokens: int
    available: int
    evictable: int
    forced: bool


@dataclass(frozen=True)
class RoundRec:
    index: int
    t_start: float
    t_end: float
    steps: tuple[Step, ...]
    pieces: tuple[tuple[str, int, int, bool], ...]  # rid, start, end, newly admitted
    cached_tokens: int
    available: int  # after the allocation
    evictable: int
    queue_len: int
    inflight: int  # in KV transfer after the forward, this round's finished included
    oom: Oom | None = None


@dataclass(frozen=True)
class Taken:
    """An outside allocation as it happened."""

    at: float
    tokens: int
    round_after: int  # the next round to start


def ceil_to(n: int, m: int) -> int:
    return -(-n // m) * m


def floor_to(n: int, m: int) -> int:
    return n // m * m


@dataclass
class World:
    cfg: Settings
    rules: Rules
    free: int  # free pages
    cache: dict[str, Entry]
    future: list[tuple[float, int, object]]  # heap of (time, order, Spec | Outside | release)
    t: float = 0.0
    queue: list[Req] = field(default_factory=list)
    chunked: Req | None = None
    inflight: list[tuple[float, str, Req]] = field(default_factory=list)  # heap
    next_round: int = 0
    stamp: int = 0
    records: list[RoundRec] = field(default_factory=list)
    taken: list[Taken] = field(default_factory=list)
    oom: Oom | None = None
    stop_arrivals_at: float | None = None
    outside_pages: int = 0  # held outside the adder now
    transfers_done: list[tuple[float, int]] = field(default_factory=list)  # (time, slots)

    # -- the pool and the prefix cache -------------------------------------------------
    def evictable(self) -> int:
        return sum(e.pages for e in self.cache.values() if e.locks == 0) * self.cfg.page

    def baseline(self) -> int:
        return self.free * self.cfg.page + self.evictable()

    def evict(self, pages: int) -> None:
        """Free unlocked entries, least recently used first, until ``pages`` are free."""
        if self.free >= pages:
            return
        for key, e in sorted(self.cache.items(), key=lambda kv: kv[1].used):
            if e.locks:
                continue
            del self.cache[key]
            self.free += e.pages
            if self.free >= pages:
                return

    def take(self, pages: int) -> bool:
        self.evict(pages)
        if self.free < pages:
            return False
        self.free -= pages
        return True

    def lock(self, req: Req) -> None:
        """Match the device prefix (locked) and what the host cache adds after it."""
        s = req.spec
        e = self.cache.get(s.group) if s.group else None
        req.device_prefix = e.pages * self.cfg.page if e else 0
        req.host_hit = s.cached - req.device_prefix
        if e:
            e.locks += 1
            self.stamp += 1
            e.used = self.stamp
            req.locked = s.group

    def unlock(self, req: Req) -> None:
        if req.locked is not None and req.locked in self.cache:
            self.cache[req.locked].locks -= 1
        req.locked = None

    def release(self, req: Req) -> None:
        """A finished request's KV after its transfer: the shared prefix it computed or
        loaded becomes that group's entry, the rest a private entry; a partial last page
        is not cached."""
        self.unlock(req)
        page, s = self.cfg.page, req.spec
        whole = req.pages - (1 if s.seq_len % page else 0)
        self.free += req.pages - whole
        self.stamp += 1
        if s.group and s.group not in self.cache and req.device_prefix == 0 and s.group_len:
            g = s.group_len // page
            self.cache[s.group] = Entry(g, 0, self.stamp)
            whole -= g
        if whole > 0:
            self.cache[s.rid] = Entry(whole, 0, self.stamp)
        req.pages = 0

    # -- outside events ----------------------------------------------------------------
    def happen_until(self, t: float) -> None:
        """Apply every outside event and transfer end at or before ``t``, in time order."""
        while True:
            tf = self.future[0][0] if self.future else float("inf")
            ti = self.inflight[0][0] if self.inflight else float("inf")
            if min(tf, ti) > t:
                return
            if ti <= tf:
                _, _, req = heapq.heappop(self.inflight)
                self.transfers_done.append((ti, req.pages * self.cfg.page))
                self.release(req)
                continue
            at, _, ev = heapq.heappop(self.future)
            self._apply(at, ev)

    def _apply(self, at: float, ev: object) -> None:
        if isinstance(ev, Spec):
            if self.stop_arrivals_at is None or at <= self.stop_arrivals_at:
                self.queue.append(Req(ev))
        elif isinstance(ev, Outside):
            want = ev.tokens // self.cfg.page
            self.evict(want)
            got = min(want, self.free)
            self.free -= got
            self.outside_pages += got
            self.taken.append(Taken(at, got * self.cfg.page, self.next_round))
            heapq.heappush(self.future, (at + ev.hold_s, -1, ("release", got)))
        else:
            self.free += ev[1]
            self.outside_pages -= ev[1]

    def next_event(self) -> float:
        tf = self.future[0][0] if self.future else float("inf")
        ti = self.inflight[0][0] if self.inflight else float("inf")
        return min(tf, ti)

    def unaccounted(self) -> int:
        """Pages of the pool that are neither free, cached, held by a request (running,
        chunked or in transfer) nor taken outside: 0 between rounds."""
        held = sum(e.pages for e in self.cache.values()) + self.outside_pages
        held += sum(req.pages for _t, _r, req in self.inflight)
        held += self.chunked.pages if self.chunked is not None else 0
        return self.cfg.pool // self.cfg.page - self.free - held


class Adder:
    """One round's admission: the compute budget and the two memory offsets over a
    baseline read live from the pool."""

    def __init__(self, w: World) -> None:
        self.w, self.cfg, self.rules = w, w.cfg, w.rules
        self.rem_chunk = w.cfg.chunk
        self.rem_input = w.cfg.max_prefill
        self.cur_off = 0
        self.tot_off = 0
        self.holds_chunk = False
        self.steps: list[Step] = []
        self.pieces: list[tuple[Req, int, int, bool]] = []

    def rem_total(self) -> int:
        return self.w.baseline() - self.tot_off

    def cur_rem(self) -> int:
        return self.w.baseline() - self.cur_off

    def state(self) -> str:
        if self.rem_total() <= 0 or self.cur_rem() <= 0:
            return NO_TOKEN
        if self.rem_input <= 0 or self.rem_chunk <= 0:
            return OTHER
        return CONTINUE

    def _charge(self, piece: int, truncated: bool, tail: int) -> None:
        page = self.cfg.page
        cost = ceil_to(piece, page) + page
        self.cur_off += cost
        self.tot_off += cost + (0 if truncated else 1)
        self.rem_chunk -= ceil_to(piece, page)
        self.rem_input -= ceil_to(piece, page)
        if truncated:
            self.holds_chunk = True
            if self.rules.reserve_tail:
                self.tot_off += ceil_to(tail, page) + 1
            if self.rules.drain:
                self.rem_chunk = 0

    def _align(self, start: int, end: int) -> int:
        """The fork floors a non-last piece's end to the align size, unless that would
        reach the piece's start."""
        if not self.rules.aligned or not self.cfg.align:
            return end
        aligned = floor_to(end, self.cfg.align)
        return aligned if aligned > start else end

    def add_chunked(self, req: Req) -> str:
        """The resumed chunk first; returns the budget state after it."""
        base, seq = self.w.baseline(), req.spec.seq_len
        before = (self.rem_chunk, base, base - self.tot_off, base - self.cur_off)
        n = min(self.rem_chunk, base - self.tot_off)
        forced = n <= 0
        if forced and self.rules.park:
            self.holds_chunk = True
            self.steps.append(self._step("add_chunked_req", req, before, "parked", 0, 0, True))
            return "parked"
        if forced:
            n = self.rem_chunk
        start = req.done
        end = seq if seq - start <= n else self._align(start, start + n)
        self._charge(end - start, end < seq, seq - end)
        self.pieces.append((req, start, end, False))
        decision = "truncated" if end < seq else "full"
        self.steps.append(self._step("add_chunked_req", req, before, decision, start, end, forced))
        return self.state()

    def _step(self, call, req, before, decision, start, end, forced=False, result=None) -> Step:
        rc, base, rt, cr = before
        return Step(
            call, req.rid, req.spec.seq_len, req.device_prefix, req.host_hit, rc, base, rt, cr,
            decision, start, end, result or self.state(), self.rem_chunk, forced,
        )  # fmt: skip

    def add_one(self, req: Req) -> str:
        """``add_one_req``: lock, memory check, whole or truncated, load-back, charge."""
        w, page = self.w, self.cfg.page
        w.lock(req)
        base = w.baseline()
        before = (self.rem_chunk, base, base - self.tot_off, base - self.cur_off)
        seq, dev = req.spec.seq_len, req.device_prefix
        if not (seq - dev) + 1 + page < base - self.tot_off:
            return self._reject(req, before, NO_TOKEN)
        prefix = dev + req.host_hit
        if ceil_to(seq - prefix, page) <= self.rem_chunk:
            end = seq
        else:
            if self.holds_chunk:
                return self._reject(req, before, OTHER)
            end = self._align(prefix, floor_to(prefix + floor_to(self.rem_chunk, page), page))
            if end <= prefix:
                return self._reject(req, before, OTHER)
        if req.host_hit:
            loaded = req.host_hit // page
            assert w.take(loaded), "the memory check leaves room for the load-back"
            req.pages += loaded
        self._charge(end - prefix, end < seq, seq - end)
        self.pieces.append((req, prefix, end, True))
        decision = "truncated" if end < seq else "full"
        self.steps.append(self._step("add_one_req", req, before, decision, prefix, end))
        return self.steps[-1].result

    def _reject(self, req: Req, before, result: str) -> str:
        self.w.unlock(req)
        self.steps.append(self._step("add_one_req", req, before, "rejected", 0, 0, result=result))
        return result


def run_round(w: World) -> RoundRec:
    """One scheduling round at ``w.t``: admission, allocation, forward, finishes."""
    index, t0, page = w.next_round, w.t, w.cfg.page
    w.next_round += 1
    adder = Adder(w)
    skip = False
    if w.chunked is not None:
        state = adder.add_chunked(w.chunked)
        skip = state not in (CONTINUE, "parked")
    if not skip:
        for req in list(w.queue):
            res = adder.add_one(req)
            if adder.steps[-1].decision != "rejected":
                w.queue.remove(req)
            if res != CONTINUE:
                break
    pieces = tuple((r.rid, s, e, new) for r, s, e, new in adder.pieces)
    need = sum(-(-e // page) - -(-s // page) for _, s, e, _n in pieces)
    if not w.take(need):
        return _out_of_memory(w, adder, index, pieces)
    new_tokens = sum(e - s for _, s, e, _n in pieces)
    t1 = t0 + (w.cfg.overhead_s + new_tokens / w.cfg.tokens_per_s if pieces else 0.0)
    for req, s, e, _new in adder.pieces:
        req.pages += -(-e // page) - -(-s // page)
        req.done = e
        if e >= req.spec.seq_len:
            if w.chunked is req:
                w.chunked = None
            heapq.heappush(w.inflight, (t1 + req.spec.transfer_s, req.rid, req))
        else:
            w.chunked = req
    rec = RoundRec(
        index, t0, t1, tuple(adder.steps), pieces,
        sum(r.device_prefix + r.host_hit for r, _s, _e, new in adder.pieces if new),
        w.free * page, w.evictable(), len(w.queue), len(w.inflight),
    )  # fmt: skip
    w.records.append(rec)
    w.t = t1
    return rec


def _out_of_memory(w: World, adder: Adder, index: int, pieces) -> RoundRec:
    """The batch's pages are short after evicting all it could: the scheduler exits."""
    chunk = next((s for s in adder.steps if s.call == "add_chunked_req"), None)
    victim = chunk.rid if chunk else pieces[-1][0]
    oom = Oom(
        index, victim, sum(e - s for _, s, e, _n in pieces), w.free * w.cfg.page,
        w.evictable(), bool(chunk and chunk.forced),
    )  # fmt: skip
    rec = RoundRec(
        index, w.t, w.t, tuple(adder.steps), pieces, 0, w.free * w.cfg.page, w.evictable(),
        len(w.queue), len(w.inflight), oom,
    )  # fmt: skip
    w.records.append(rec)
    w.oom = oom
    return rec


def _arrivals_left(w: World) -> bool:
    cut = w.stop_arrivals_at if w.stop_arrivals_at is not None else float("inf")
    return any(isinstance(ev, Spec) and at <= cut for at, _o, ev in w.future)


def busy(w: World) -> bool:
    return w.chunked is not None or bool(w.queue)


def run(w: World, *, stop_after: int | None = None) -> str:
    """Run rounds until an out-of-memory, the horizon, or nothing left to do. Returns how
    it ended: ``oom``, ``horizon``, ``drained`` (every request ran; KV transfers may
    still be under way) or ``stuck``."""
    while w.oom is None:
        if stop_after is not None and w.next_round > stop_after:
            return "stopped"
        w.happen_until(w.t)
        if not busy(w):
            if not _arrivals_left(w):
                return "drained"
            nxt = w.next_event()
            if nxt > w.cfg.horizon_s:
                return "horizon"
            w.t = nxt
            continue
        if w.t > w.cfg.horizon_s:
            return "horizon"
        rec = run_round(w)
        if rec.oom is None and not rec.pieces:
            # nothing could run: the next round is worth trying only once something changed
            nxt = w.next_event()
            if nxt == float("inf"):
                return "stuck"
            w.t = max(w.t, nxt)
    return "oom"
