"""The prefill node's round loop: resume the chunked request, admit, allocate, forward,
hand finished requests to KV transfer, and release their slots when the transfer ends."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, cast

from mypy_extensions import mypyc_attr

from kvforensics.collector import fewer_collections
from kvforensics.model.adder import CONTINUE, PrefillAdder
from kvforensics.model.config import Config
from kvforensics.model.ledger import Ledger, Step, allocation, appender
from kvforensics.model.policies import Policy
from kvforensics.model.pool import PagePool, PrefillOutOfMemory
from kvforensics.model.profiles import FORK, Profile
from kvforensics.model.request import Request
from kvforensics.model.sizing import pages_for

if TYPE_CHECKING:
    import polars as pl


@mypyc_attr(native_class=False)  # frozen: mypyc's copy and pickle would set its fields
@dataclass(frozen=True, slots=True)
class Timing:
    """How long things take. Rounds and transfers are what move memory, so the model needs
    a clock; every figure here is configuration (a scenario, a flag, or read from a log).

    A round lasts ``round_overhead_s + new_tokens / prefill_tokens_per_s``; a finished
    request's KV transfer lasts ``transfer_latency_s + seq_len / transfer_tokens_per_s``
    (``0`` tokens/s means no per-token cost).
    """

    round_overhead_s: float = 0.0
    prefill_tokens_per_s: float = 0.0
    transfer_latency_s: float = 0.0
    transfer_tokens_per_s: float = 0.0

    def round_seconds(self, new_tokens: int) -> float:
        rate = self.prefill_tokens_per_s
        return self.round_overhead_s + (new_tokens / rate if rate else 0.0)

    def transfer_seconds(self, tokens: int) -> float:
        rate = self.transfer_tokens_per_s
        return self.transfer_latency_s + (tokens / rate if rate else 0.0)


_arrival = attrgetter("arrival")


class PrefixSource(Protocol):
    """Where prefix hits come from when they are not fixed in advance (trace-driven runs)."""

    def match(self, req: Request, pool: PagePool) -> None:
        """Set ``req``'s device prefix, host hit and cache keys from what is cached now."""

    def checkpoint(self, req: Request, end: int, pool: PagePool) -> None:
        """``req``'s tokens up to ``end`` are computed (after every forward)."""

    def on_transfer_done(self, req: Request) -> None:
        """``req``'s KV has left for the decode node and is cache from now on."""


# init=False and a hand-written __init__ (here and in RoundRecord): mypyc compiles it,
# while the one dataclass() writes stays interpreted, a call per finished request or round
# of a forward run; dataclass() still gives the fields, __eq__ and __repr__
@mypyc_attr(allow_interpreted_subclasses=True)  # copy and pickle make one without __init__
@dataclass(slots=True, init=False)
class Inflight:
    """KV that is being sent to a decode node: held until ``done_at``, then cache."""

    rid: str
    done_at: float
    prefix_keys: tuple[str, ...] = ()
    cache_keys: tuple[tuple[str, int], ...] = ()

    def __init__(
        self,
        rid: str,
        done_at: float,
        prefix_keys: tuple[str, ...] = (),
        cache_keys: tuple[tuple[str, int], ...] = (),
    ) -> None:
        self.rid, self.done_at = rid, done_at
        self.prefix_keys, self.cache_keys = prefix_keys, cache_keys


class NodeState(NamedTuple):
    """A node caught mid-flight, as a value: what its pool holds and who is where.

    ``evictable`` is the cache in eviction order (oldest first); ``locked`` are entries of
    it that requests of earlier rounds still lock; ``held`` are slots requests own (a
    chunked request's computed part, KV being sent to a decode node).

    A named tuple (immutable, built by name): a replay makes one for every round it re-runs.
    """

    free: int
    evictable: tuple[tuple[str, int], ...] = ()
    locked: tuple[str, ...] = ()
    held: tuple[tuple[str, int], ...] = ()
    waiting: tuple[Request, ...] = ()
    chunked: Request | None = None
    inflight: tuple[Inflight, ...] = ()
    first_round: int = 0
    start_time: float = 0.0
    #: slots of the baseline no allocation may take (held by another pool's demand)
    unevictable: int = 0


class Batch(NamedTuple):
    """One round's admissions and allocation (``PrefillNode.batch``)."""

    adder: PrefillAdder
    #: (rid, start, end) asked of the allocator, in admission order
    pieces: list[tuple[str, int, int]]
    #: the baseline when the adder began (after what was taken outside it)
    baseline: int
    #: the chunked request's budget state skipped the waiting queue
    skipped: bool
    oom: OutOfMemory | None
    #: available + evictable when the batch was allocated (after admissions and load-backs)
    available: int = 0


@mypyc_attr(allow_interpreted_subclasses=True)  # copy and pickle make one without __init__
@dataclass(slots=True, init=False)
class RoundRecord:
    round: int
    time: float
    pieces: list[tuple[str, int, int]]
    #: (call, rid, decision, budget_state)
    decisions: list[tuple[str, str, str, str]]
    skipped_waiting: bool
    baseline_start: int
    baseline_end: int
    used_end: int
    #: promised to later rounds but not yet allocated: the tails of unfinished chunks
    unallocated_tail: int

    def __init__(
        self,
        round: int,
        time: float,
        pieces: list[tuple[str, int, int]],
        decisions: list[tuple[str, str, str, str]],
        skipped_waiting: bool,
        baseline_start: int,
        baseline_end: int,
        used_end: int,
        unallocated_tail: int,
    ) -> None:
        self.round, self.time, self.pieces, self.decisions = round, time, pieces, decisions
        self.skipped_waiting = skipped_waiting
        self.baseline_start, self.baseline_end = baseline_start, baseline_end
        self.used_end, self.unallocated_tail = used_end, unallocated_tail


@mypyc_attr(allow_interpreted_subclasses=True)  # copy and pickle make one without __init__
@dataclass(slots=True)
class OutOfMemory:
    round: int
    rid: str
    tokens: int
    available: int
    available_size: int
    evictable_size: int
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "rid": self.rid,
            "tokens": self.tokens,
            "available": self.available,
        }


@mypyc_attr(allow_interpreted_subclasses=True)  # copy and pickle make one without __init__
@dataclass(slots=True)
class RunResult:
    policy: str
    rounds: list[RoundRecord]
    ledger: Ledger
    oom: OutOfMemory | None
    requests: dict[str, Request]
    pool: PagePool
    waiting_left: list[str] = field(default_factory=list)

    def ledger_frame(self) -> pl.DataFrame:
        """The ledger as a DataFrame, with the policy as first column."""
        import polars as pl

        return self.ledger.to_frame().select(pl.lit(self.policy).alias("policy"), pl.all())

    def as_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "oom": self.oom.as_dict() if self.oom else None,
            "rounds": [
                {
                    "round": r.round,
                    "time": round(r.time, 6),
                    "pieces": [{"rid": x, "start": s, "end": e} for x, s, e in r.pieces],
                    "decisions": [
                        {"call": c, "rid": x, "decision": d, "result": b}
                        for c, x, d, b in r.decisions
                    ],
                    "skipped_waiting": r.skipped_waiting,
                    "baseline_start": r.baseline_start,
                    "baseline_end": r.baseline_end,
                }
                for r in self.rounds
            ],
            "unfinished": sorted(
                rid for rid, q in self.requests.items() if q.finished_round is None
            ),
        }


@mypyc_attr(allow_interpreted_subclasses=True)  # copy and pickle make one without __init__
class PrefillNode:
    def __init__(
        self,
        cfg: Config,
        policy: Policy,
        pool: PagePool,
        *,
        waiting: Iterable[Request] = (),
        chunked: Request | None = None,
        inflight: Iterable[Inflight] = (),
        arrivals: Sequence[Request] = (),
        timing: Timing = Timing(),
        profile: Profile = FORK,
        first_round: int = 0,
        start_time: float = 0.0,
        record: bool = True,
        prefix_cache: PrefixSource | None = None,
        outside: dict[int, int] | None = None,
        hold_until: float = -math.inf,
        evictions: dict[int, tuple[tuple[str, int], ...]] | None = None,
    ):
        self.cfg, self.policy, self.pool, self.profile = cfg, policy, pool, profile
        if profile.whole_page_free:
            pool.free = cfg.floor_page(pool.free)  # a real allocator holds whole pages
        if profile.swa_page_per_request and getattr(pool, "swa", False):
            pool.page_per_request = True
        self.timing = timing
        self.prefix_cache = prefix_cache
        #: round -> tokens taken from the pool by something outside the adder just before
        #: that round (an observed fact, replayed the same under every policy); a negative
        #: number is memory that came back (a KV transfer ended) before that round
        self.outside = dict(outside or {})
        #: round -> cache entries cut to (key, tokens kept) just before that round: an
        #: eviction the logs show (a later check finds less of its prefix on the device)
        self.evictions = dict(evictions or {})
        #: no KV transfer ends before this time: until then memory comes back only through
        #: ``outside``'s returns (what the logs show), never on the transfer clock
        self.hold_until = hold_until
        self.waiting: list[Request] = list(waiting)
        self.chunked = chunked
        self._inflight: list[tuple[float, int, Inflight]] = []
        self._seq = 0
        for item in inflight:
            self._push_inflight(item)
        self._arrivals = sorted(arrivals, key=_arrival) if arrivals else []
        self._next_arrival = 0
        self.round = first_round
        self.now = start_time
        self.ledger = Ledger() if record else None
        self.rounds: list[RoundRecord] = []
        self.requests: dict[str, Request] = {r.rid: r for r in self.waiting}
        for r in self._arrivals:
            self.requests[r.rid] = r
        if chunked is not None:
            self.requests[chunked.rid] = chunked

    def _push_inflight(self, item: Inflight) -> None:
        self._seq += 1
        heapq.heappush(self._inflight, (item.done_at, self._seq, item))

    # -- events between rounds ------------------------------------------------
    def _absorb(self) -> None:
        """Arrivals join the queue; finished transfers turn their KV into cache."""
        arr = self._arrivals
        while self._next_arrival < len(arr) and arr[self._next_arrival].arrival <= self.now:
            self.waiting.append(arr[self._next_arrival])
            self._next_arrival += 1
        while self._inflight and max(self._inflight[0][0], self.hold_until) <= self.now:
            _, _, item = heapq.heappop(self._inflight)
            keys = item.cache_keys or ((f"kv:{item.rid}", self.pool.held.get(item.rid, 0)),)
            self.pool.release(item.rid, keys)
            self.pool.unlock(item.prefix_keys)
            if self.prefix_cache is not None and item.rid in self.requests:
                self.prefix_cache.on_transfer_done(self.requests[item.rid])

    def _next_event_time(self) -> float:
        t = math.inf
        if self._next_arrival < len(self._arrivals):
            t = self._arrivals[self._next_arrival].arrival
        if self._inflight:
            t = min(t, max(self._inflight[0][0], self.hold_until))
        return t

    def transfers(self) -> list[Inflight]:
        """The KV still being sent, in the order the transfers end."""
        return [item for _, _, item in sorted(self._inflight, key=lambda t: (t[0], t[1]))]

    def pending_arrivals(self) -> list[Request]:
        """The requests that have not reached the queue yet, in arrival order."""
        return self._arrivals[self._next_arrival :]

    def inflight_count(self) -> int:
        """Requests whose KV is still being sent (what ``#inflight-req`` prints)."""
        return len(self._inflight)

    def idle(self) -> bool:
        return (
            self.chunked is None
            and not self.waiting
            and self._next_arrival >= len(self._arrivals)
            and not self._inflight
        )

    # -- one round ------------------------------------------------------------
    def step(self) -> RoundRecord | OutOfMemory | None:
        """Run one round. Returns its record, the out-of-memory it hit, or None when
        there is nothing left to do."""
        if not self._wait_for_work():
            return None
        t_start = self.now
        adder, pieces, base0, skipped, oom, _ = self.batch()
        if oom is not None:
            return oom
        # an adder's step always has these four
        decisions = cast(
            "list[tuple[str, str, str, str]]",
            [(s.call, s.rid, s.decision, s.budget_state) for s in adder.steps],
        )
        if not pieces:
            # Nothing fits: wait for memory (a transfer) or for new work.
            rec = self._close_round(t_start, [], decisions, skipped, base0, 0)
            t = self._next_event_time()
            if t == math.inf:
                return None  # stuck for good: nothing will ever free memory
            self.now = max(self.now, t)
            return rec
        self._compute(adder.pieces)
        self.chunked = adder.new_chunked
        tail = self.chunked.seq_len - self.chunked.done if self.chunked else 0
        return self._close_round(t_start, pieces, decisions, skipped, base0, tail)

    def batch(self) -> Batch:
        """This round's admissions and its allocation, without the forward pass: all that
        re-running one round needs (``step`` runs it, then computes and moves on)."""
        pool = self.pool
        pool.round = self.round
        self._take_outside()
        base0 = pool.baseline()
        adder = PrefillAdder(
            self.cfg, self.policy, pool, round_no=self.round, ledger=self.ledger,
            profile=self.profile,
        )  # fmt: skip
        try:
            skipped = self._admit(adder)
        except PrefillOutOfMemory as exc:
            # a host hit's load-back found the slots the baseline counted unevictable
            if self.waiting:
                rid = self.waiting[0].rid
            else:
                assert self.chunked is not None, "a load-back with no request to load for"
                rid = self.chunked.rid
            lost = self._out_of_memory(exc, rid, adder.step + 1, base0)
            return Batch(adder, [], base0, False, lost, lost.available)
        if not adder.pieces:
            return Batch(adder, [], base0, skipped, None, pool.baseline())
        pieces = [(r.rid, s, e) for r, s, e in adder.pieces]
        available = pool.baseline()
        oom = self._allocate(pieces, adder.step)
        return Batch(adder, pieces, base0, skipped, oom, available)

    def _wait_for_work(self) -> bool:
        """Let time pass until there is a request to schedule; False when none will come."""
        self._absorb()
        while self.chunked is None and not self.waiting:
            t = self._next_event_time()
            if t == math.inf:
                return False
            self.now = max(self.now, t)
            self._absorb()
        return True

    def _allocate(self, pieces: list[tuple[str, int, int]], step: int) -> OutOfMemory | None:
        """Ask the pool for the whole batch at once (SGLang allocates a batch in one call);
        ``step`` is the adder's last step number, the allocations' steps follow it."""
        pool = self.pool
        base_before = pool.baseline()
        try:
            pool.alloc_batch(pieces)
        except PrefillOutOfMemory as exc:
            # The scheduler reports the batch; blame the request whose piece could not fit.
            return self._out_of_memory(exc, self._victim(pieces), step + 1, base_before)
        add = appender(self.ledger)
        if add is not None:
            after, rnd, page = pool.baseline(), self.round, self.cfg.page_size
            for rid, s, e in pieces:
                step += 1
                add(allocation(rnd, step, rid, s, e, pages_for(s, e, page), base_before, after))
        return None

    def _compute(self, pieces: list[tuple[Request, int, int]]) -> None:
        """The forward pass: the clock moves by the round's new tokens, every piece is
        computed, and finished requests hand their KV to the transfer."""
        self.now += self.timing.round_seconds(sum(e - s for _, s, e in pieces))
        for req, s, e in pieces:
            req.done = e
            req.pieces.append((self.round, s, e))
            if self.prefix_cache is not None:
                self.prefix_cache.checkpoint(req, e, self.pool)
            if e >= req.seq_len:
                req.finished_round, req.finished_time = self.round, self.now
                self._push_inflight(
                    Inflight(
                        req.rid,
                        self.now + self.timing.transfer_seconds(req.seq_len),
                        req.prefix_keys,
                        req.cache_keys,
                    )
                )

    def _close_round(
        self,
        t_start: float,
        pieces: list[tuple[str, int, int]],
        decisions: list[tuple[str, str, str, str]],
        skipped: bool,
        base0: int,
        tail: int,
    ) -> RoundRecord:
        """Record the round with the pool as it is now, and move to the next one."""
        pool = self.pool
        pool.check()  # never more held than the pool; a paged pool's free in whole pages
        rec = RoundRecord(
            self.round, t_start, pieces, decisions, skipped, base0, pool.baseline(),
            pool.used(), tail,
        )  # fmt: skip
        self.rounds.append(rec)
        self.round += 1
        return rec

    def _take_outside(self) -> None:
        """Slots taken before this round by something the adder does not account for; never
        more than the pool has (what is gone is gone), and held until the end of the run."""
        if self.evictions:
            for key, keep in self.evictions.pop(self.round, ()):
                self.pool.evict_entry(key, keep)
        if not self.outside:
            return
        tokens = self.outside.pop(self.round, 0)
        if tokens < 0:
            self._give_back(-tokens)
            return
        take = min(self.cfg.floor_page(tokens), self.cfg.floor_page(self.pool.baseline()))
        if take > 0:
            # A load-back-like allocation outside the batch: ``exec`` replays it the same way.
            self.pool.alloc(f"outside@{self.round}", 0, take, op="load_back")

    def _give_back(self, tokens: int) -> None:
        """Memory the logs show coming back before this round: slots of the KV in transfer,
        the transfers that were due first giving first (whole pages; never more than is
        held in transfer)."""
        pool, left = self.pool, self.cfg.floor_page(tokens)
        # NOTE: the transfer stays in flight; when it ends it releases what is left
        for _, _, item in sorted(self._inflight):
            left -= pool.free_held(item.rid, left)
            if not left:
                break

    def prepare(self) -> None:
        """What happens before this round's adder starts: arrivals join, transfers that are
        due end, and what was taken or given back outside the adder is applied (so that the
        pool's baseline is the one the round's adder reads). ``batch`` does the same; calling
        both applies it once."""
        self._absorb()
        self._take_outside()

    def _refresh_prefix(self, req: Request) -> None:
        """A waiting request's device prefix may have been evicted (tail first) since it
        was matched. HiCache writes every block through to the host, so what left the
        device is now a host hit to load back."""
        cached = sum(self.pool.cached(k) for k in req.prefix_keys)
        if cached < req.device_prefix:
            cached = self.cfg.floor_page(cached)
            req.host_hit += req.device_prefix - cached
            req.device_prefix = cached

    def _admit(self, adder: PrefillAdder) -> bool:
        """The chunked request, then the queue, through the adder; True when the chunked
        request's budget state skipped the queue."""
        if self.chunked is not None:
            adder.add_chunked_req(self.chunked)
            if adder.budget_state() in self.profile.skip_waiting_on:
                return True
        # NOTE: a refusal always ends the loop (it returns NO_TOKEN or OTHER), so the
        # admitted requests are exactly the first ones of the queue.
        admitted = 0
        try:
            for req in self.waiting:
                if self.prefix_cache is not None:
                    self.prefix_cache.match(req, self.pool)
                elif req.prefix_keys:
                    self._refresh_prefix(req)
                rec = adder.add_one_req(req)
                if rec.decision != "rejected":
                    admitted += 1
                    req.admitted_round = self.round
                if rec.budget_state != CONTINUE:
                    break
        finally:
            del self.waiting[:admitted]
        return False

    def _out_of_memory(
        self, exc: PrefillOutOfMemory, victim: str, step: int, base_before: int
    ) -> OutOfMemory:
        """The round's out-of-memory, pinned on ``victim``, with its ledger step."""
        if self.ledger is not None:
            self.ledger.add(
                Step(
                    round=self.round,
                    step=step,
                    call="allocate",
                    rid=victim,
                    baseline=base_before,
                    baseline_after=self.pool.baseline(),
                    allocated=0,
                    budget_state="OOM",
                    reason=str(exc).splitlines()[1],
                )
            )
        return OutOfMemory(
            self.round,
            victim,
            exc.tokens,
            exc.available,
            exc.available_size,
            exc.evictable_size,
            str(exc),
        )

    def _victim(self, pieces: list[tuple[str, int, int]]) -> str:
        """The request the out-of-memory is pinned on: the chunked one if any (its later
        pieces were promised at admission), else the last piece of the batch."""
        for rid, _s, _e in pieces:
            req = self.requests.get(rid)
            if (
                req is not None
                and req.admitted_round is not None
                and req.admitted_round < self.round
            ):
                return rid
        return pieces[-1][0]

    def pending(self) -> int:
        """Requests not finished yet (waiting, chunked, or still to arrive)."""
        return (
            len(self.waiting)
            + (self.chunked is not None)
            + len(self._arrivals)
            - self._next_arrival
        )

    @fewer_collections()
    def run(
        self, max_rounds: int | None = None, on_round: Callable[[PrefillNode], None] | None = None
    ) -> RunResult:
        """Rounds until nothing is left, an out-of-memory, or ``max_rounds``.

        ``on_round`` is called after each round (a progress bar; it must not change the node).
        """
        oom = None
        n = 0
        while max_rounds is None or n < max_rounds:
            out = self.step()
            if out is None:
                break
            if isinstance(out, OutOfMemory):
                oom = out
                break
            n += 1
            if on_round is not None:
                on_round(self)
        return RunResult(
            policy=self.policy.name,
            rounds=self.rounds,
            ledger=self.ledger if self.ledger is not None else Ledger(),
            oom=oom,
            requests=self.requests,
            pool=self.pool,
            waiting_left=[r.rid for r in self.waiting],
        )


def start_node(
    cfg: Config,
    policy: Policy,
    state: NodeState,
    *,
    arrivals: Sequence[Request] = (),
    timing: Timing = Timing(),
    profile: Profile = FORK,
    record: bool = True,
    prefix_cache: PrefixSource | None = None,
    outside: dict[int, int] | None = None,
    ops: bool = True,
    hold_until: float = -math.inf,
    evictions: dict[int, tuple[tuple[str, int], ...]] | None = None,
) -> PrefillNode:
    """The one way to start the model mid-flight (``outside``: round -> tokens taken
    from the pool outside the adder; ``ops``: keep the pool's op log, which ``exec``
    replays). Raises ValueError when the state does not fit the pool.

    A plain function rather than a class method: compiled, a direct call with its
    keywords matched at build time, for the callers that start a node every round."""
    return PrefillNode(cfg, policy, _pool_at(cfg, state, ops), waiting=state.waiting,
                       chunked=state.chunked, inflight=state.inflight, arrivals=arrivals,
                       timing=timing, profile=profile, first_round=state.first_round,
                       start_time=state.start_time, record=record, prefix_cache=prefix_cache,
                       outside=outside, hold_until=hold_until,
                       evictions=evictions)  # fmt: skip


def _pool_at(cfg: Config, state: NodeState, ops: bool) -> PagePool:
    """The pool of a node started in ``state`` (``ops``: keep its op log)."""
    pool = PagePool(
        page_size=cfg.page_size,
        size=cfg.pool_size,
        free=state.free,
        evictable=state.evictable,
        cache_kind=cfg.cache_kind,
        record=ops,
        unevictable=state.unevictable,
        swa_size=cfg.swa_pool_size,
    )
    if state.locked:
        pool.lock(state.locked)
    for owner, tokens in state.held:
        pool.hold(owner, tokens)
    return pool
