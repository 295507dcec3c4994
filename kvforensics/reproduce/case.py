"""A reproducer candidate as a value: a scenario's facts, small enough to shrink field by
field, and the scenario tables it is written as (``kvforensics simulate`` reads them)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kvforensics.errors import InputError
from kvforensics.model import Config, PrefillNode, Request
from kvforensics.model.sizing import ceil_page
from kvforensics.scenario import Scenario, parse_scenario

#: the node's sizes a case carries (``[config]``), in the order the TOML writes them
SIZES = (
    "page_size",
    "align_size",
    "truncation_align_size",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "max_new_tokens",
)


@dataclass(frozen=True, slots=True)
class Ask:
    """A request of the case: waiting, arriving later, or the chunk resumed first."""

    rid: str
    seq_len: int
    prefix_len: int = 0
    host_hit_len: int = 0
    arrival: float = 0.0
    prefix_evictable: bool = True


@dataclass(frozen=True, slots=True)
class Transfer:
    """KV being sent to a decode node: ``tokens`` held until ``done_at``."""

    rid: str
    tokens: int
    done_at: float


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    sizes: tuple[tuple[str, int], ...]
    profile: str
    cache_kind: str
    free: int
    evictable: int
    waiting: tuple[Ask, ...]
    arrivals: tuple[Ask, ...] = ()
    inflight: tuple[Transfer, ...] = ()
    chunked: Ask | None = None
    chunked_done: int = 0
    #: (round, tokens) taken outside the adder just before that round
    outside: tuple[tuple[int, int], ...] = ()
    round_overhead_s: float = 1.0
    transfer_latency_s: float = 0.0

    def size(self, name: str) -> int:
        return dict(self.sizes)[name]

    def with_sizes(self, **changes: int) -> Case:
        return replace(self, sizes=tuple((k, changes.get(k, v)) for k, v in self.sizes))

    @property
    def page(self) -> int:
        return self.size("page_size")

    def held(self) -> int:
        """Slots neither free nor evictable at the start: KV in transfer, and the resumed
        chunk's computed part with the device prefix it locks."""
        chunk = ceil_page(self.chunked_done, self.page) if self.chunked is not None else 0
        return sum(t.tokens for t in self.inflight) + chunk

    @property
    def pool_size(self) -> int:
        """The smallest pool that holds the case: free + evictable + held (at least a page)."""
        return max(self.free + self.evictable + self.held(), self.page)

    def requests(self) -> tuple[Ask, ...]:
        return (*((self.chunked,) if self.chunked else ()), *self.waiting, *self.arrivals)

    def tables(self, description: str = "") -> dict[str, Any]:
        """The scenario's TOML tables (what ``parse_scenario`` and the TOML writer take)."""
        config: dict[str, Any] = {
            k: v for k, v in self.sizes if v or k not in ("align_size", "truncation_align_size")
        }
        config.update(pool_size=self.pool_size, cache_kind=self.cache_kind)
        out: dict[str, Any] = {"name": self.name, "description": description, "profile": self.profile}
        out["config"] = config
        out["pool"] = {"free": self.free, "evictable": self.evictable}
        out["timing"] = {
            "round_overhead_s": self.round_overhead_s,
            "transfer_latency_s": self.transfer_latency_s,
        }
        out["waiting"] = [_ask(a) for a in self.waiting]
        out["arrivals"] = [_ask(a) for a in self.arrivals]
        out["inflight"] = [{"rid": t.rid, "tokens": t.tokens, "done_at": t.done_at}
                           for t in self.inflight]  # fmt: skip
        if self.chunked is not None:
            out["chunked"] = {**_ask(self.chunked), "done": self.chunked_done}
        out["outside"] = [{"before_round": r, "tokens": t} for r, t in self.outside]
        return {k: v for k, v in out.items() if v != []}

    def scenario(self) -> Scenario:
        return parse_scenario(self.tables(), name=self.name)

    def node(self, policy: str, record: bool = True) -> PrefillNode:
        return self.scenario().build_node(policy, record=record)


def _ask(a: Ask) -> dict[str, Any]:
    out = {"rid": a.rid, "seq_len": a.seq_len}
    if a.prefix_len:
        out["prefix_len"] = a.prefix_len
        if not a.prefix_evictable:
            out["prefix_evictable"] = False
    if a.host_hit_len:
        out["host_hit_len"] = a.host_hit_len
    if a.arrival:
        out["arrival"] = a.arrival
    return out


def from_scenario(sc: Scenario) -> Case:
    """A hand-written scenario as a case (a trace-driven one cannot be shrunk request by
    request: its prefixes come from the trace's block hashes)."""
    if sc.trace is not None:
        raise InputError(
            f"scenario {sc.name}: a trace-driven scenario cannot be reduced; reproduce "
            "reads a scenario with [[waiting]]/[[arrivals]] tables, or the logs"
        )
    cfg = sc.cfg
    chunked, done = _chunked_from_toml(sc.chunked)
    case = Case(
        name=sc.name,
        sizes=_sizes(cfg),
        profile=sc.profile,
        cache_kind=cfg.cache_kind,
        free=sc.free,
        evictable=sc.evictable,
        waiting=tuple(_ask_from_toml(w) for w in sc.waiting),
        arrivals=tuple(_ask_from_toml(a) for a in sc.arrivals),
        inflight=tuple(_transfer_from_toml(t) for t in sc.inflight),
        chunked=chunked,
        chunked_done=done,
        outside=tuple(sorted((r - sc.first_round, t) for r, t in sc.outside.items())),
        round_overhead_s=sc.timing.round_overhead_s,
        transfer_latency_s=sc.timing.transfer_latency_s,
    )
    return _checked(case, cfg.pool_size)


# The scenario keeps its request tables as the TOML gives them: read once, here.
def _ask_from_toml(spec: dict[str, Any]) -> Ask:
    return Ask(
        str(spec["rid"]),
        int(spec["seq_len"]),
        int(spec.get("prefix_len", 0)),
        int(spec.get("host_hit_len", 0)),
        float(spec.get("arrival", 0.0)),
        bool(spec.get("prefix_evictable", True)),
    )


def _transfer_from_toml(t: dict[str, Any]) -> Transfer:
    return Transfer(str(t["rid"]), int(t["tokens"]), float(t["done_at"]))


def _chunked_from_toml(spec: dict[str, Any] | None) -> tuple[Ask | None, int]:
    """The chunk resumed first and how much of it is done (None, 0 without one)."""
    if not spec:
        return None, 0
    return _ask_from_toml(spec), int(spec["done"])


def _sizes(cfg: Config) -> tuple[tuple[str, int], ...]:
    return tuple((k, getattr(cfg, k)) for k in SIZES)


def _checked(case: Case, pool_size: int) -> Case:
    if case.pool_size > pool_size:
        raise InputError(f"{case.name}: the state holds more than its pool ({pool_size})")
    return case


def from_node(node: PrefillNode, name: str) -> Case:
    """The state a forward run starts from (a replay's start round), as a case: the pool's
    free and evictable slots, the queue, the chunk it resumes, the KV in transfer, the
    requests still to arrive and the outside allocations, on the node's own clock."""
    cfg, pool = node.cfg, node.pool
    entries = dict(pool.evictable_entries())
    stuck = pool.evictable_size() - sum(entries.values())
    if cfg.swa_pool_size is not None or stuck:
        raise InputError(
            f"{name}: a second (SWA) pool or cache that cannot be evicted has no place in a "
            "scenario file yet; reproduce handles single-pool incidents"
        )
    waiting = tuple(_from_request(r, entries) for r in node.waiting)
    chunked = node.chunked
    held = dict(pool.held)
    carried = {t.rid for t in node.transfers()}
    # Slots in use that no request holds (a locked prefix, a pool's rounding) stay out of
    # the case's pool: they are neither free nor evictable for the rounds it runs.
    if set(held) - carried - ({chunked.rid} if chunked else set()):
        raise InputError(f"{name}: slots held by a request neither in transfer nor resumed")
    t0, r0 = node.now, node.round
    case = Case(
        name=name,
        sizes=_sizes(cfg),
        profile=node.profile.name,
        cache_kind=cfg.cache_kind,
        free=pool.free,
        evictable=pool.evictable_size(),
        waiting=waiting,
        arrivals=tuple(
            replace(_from_request(r, {}), arrival=max(0.0, r.arrival - t0))
            for r in node.pending_arrivals()
        ),
        inflight=tuple(
            Transfer(t.rid, held[t.rid], max(0.0, t.done_at - t0)) for t in node.transfers()
        ),
        chunked=_from_request(chunked, {}) if chunked else None,
        chunked_done=chunked.done if chunked else 0,
        outside=tuple(sorted((r - r0, t) for r, t in node.outside.items() if r >= r0)),
        round_overhead_s=node.timing.round_overhead_s,
        transfer_latency_s=node.timing.transfer_latency_s,
    )
    return _checked(case, cfg.pool_size)


def _from_request(r: Request, entries: dict[str, int]) -> Ask:
    """A model request as a case's: its device prefix is evictable cache when the pool
    holds its own entry for it (a scenario carves ``ceil_page(prefix)`` for it)."""
    own = entries.get(f"prefix:{r.rid}")
    if r.prefix_keys and len(r.prefix_keys) > 1:
        raise InputError(
            f"{r.rid}: a prefix shared with another request has no place in a scenario"
        )
    return Ask(r.rid, r.seq_len, r.device_prefix, r.host_hit, r.arrival,
               own is not None or not r.device_prefix)  # fmt: skip
