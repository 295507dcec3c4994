"""A scenario: the starting state of a prefill node and the work that reaches it, as read
from a TOML file or a trace (``loader``); it builds a fresh node for any policy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from kvforensics.errors import InputError
from kvforensics.model import (
    Config,
    Inflight,
    NodeState,
    PrefillNode,
    Request,
    Timing,
    get_policy,
    get_profile,
    start_node,
)


class Workload(Protocol):
    """Work that builds the node itself (a request trace)."""

    def build_node(self, sc: Scenario, policy: str, *, record: bool = True) -> PrefillNode: ...

    def works(self) -> list[int]:
        """The tokens each request computes."""
        ...


@dataclass
class Scenario:
    """Everything needed to build a fresh node for any policy (building is repeatable:
    each call makes new request and pool objects)."""

    name: str
    description: str
    cfg: Config
    free: int
    evictable: int
    waiting: list[dict[str, Any]]
    arrivals: list[dict[str, Any]] = field(default_factory=list)
    inflight: list[dict[str, Any]] = field(default_factory=list)
    chunked: dict[str, Any] | None = None
    timing: Timing = field(default_factory=Timing)
    first_round: int = 0
    start_time: float = 0.0
    profile: str = "fork"
    #: the work comes from a trace (a ``scenario.trace.TraceWorkload``)
    trace: Workload | None = None
    #: round -> slots taken outside the adder just before it (``[[outside]]``)
    outside: dict[int, int] = field(default_factory=dict)

    def build_node(self, policy: str, *, record: bool = True) -> PrefillNode:
        if self.trace is not None:
            return self.trace.build_node(self, policy, record=record)
        entries: dict[str, int] = {}
        carved = 0
        reqs = []
        for spec in self.waiting:
            req = _request(spec)
            if spec.get("prefix_evictable", True) and req.device_prefix:
                key = f"prefix:{req.rid}"
                req.prefix_keys = (key,)
                entries[key] = self.cfg.ceil_page(req.device_prefix)
                carved += entries[key]
            reqs.append(req)
        if carved > self.evictable:
            raise InputError(
                f"scenario {self.name}: evictable device prefixes ({carved}) exceed the "
                f"evictable pool ({self.evictable})"
            )
        # The rest of the evictable cache is anonymous and older: evicted first.
        held = [(str(item["rid"]), int(item["tokens"])) for item in self.inflight]
        inflight = [Inflight(str(item["rid"]), float(item["done_at"])) for item in self.inflight]
        chunked = None
        if self.chunked is not None:
            chunked = _request(self.chunked)
            chunked.done = int(self.chunked["done"])
            chunked.admitted_round = self.first_round - 1
            held.append((chunked.rid, self.cfg.ceil_page(chunked.done) - chunked.device_prefix))
        total = self.free + self.evictable + sum(t for _, t in held)
        if total > self.cfg.pool_size:
            raise InputError(
                f"scenario {self.name}: free + evictable + held ({total}) "
                f"exceed pool_size {self.cfg.pool_size}"
            )
        state = NodeState(
            free=self.free,
            evictable=(("cache", self.evictable - carved), *entries.items()),
            held=tuple(held),
            waiting=tuple(reqs),
            chunked=chunked,
            inflight=tuple(inflight),
            first_round=self.first_round,
            start_time=self.start_time,
        )
        try:
            return start_node(
                self.cfg,
                get_policy(policy),
                state,
                arrivals=[_request(a) for a in self.arrivals],
                timing=self.timing,
                profile=get_profile(self.profile),
                record=record,
                outside=self.outside,
            )
        except ValueError as exc:
            raise InputError(f"scenario {self.name}: {exc}") from None


def _request(spec: dict[str, Any]) -> Request:
    try:
        return Request(
            rid=str(spec["rid"]),
            seq_len=int(spec["seq_len"]),
            device_prefix=int(spec.get("prefix_len", 0)),
            host_hit=int(spec.get("host_hit_len", 0)),
            arrival=float(spec.get("arrival", 0.0)),
        )
    except KeyError as exc:
        raise InputError(f"request {spec!r} lacks {exc.args[0]!r}") from None
    except ValueError as exc:
        raise InputError(str(exc)) from None
