"""Read a scenario TOML into model objects. The only module of this stage that does I/O."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
)

_CONFIG_KEYS = {f for f in Config.__dataclass_fields__}
_TIMING_KEYS = {f for f in Timing.__dataclass_fields__}


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
    trace: Any = None  # a scenario.trace.TraceWorkload when the work comes from a trace

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
            return PrefillNode.from_state(
                self.cfg,
                get_policy(policy),
                state,
                arrivals=[_request(a) for a in self.arrivals],
                timing=self.timing,
                profile=get_profile(self.profile),
                record=record,
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


def parse_scenario(
    data: dict[str, Any], *, name: str = "scenario", base: Path | None = None
) -> Scenario:
    try:
        conf = dict(data["config"])
    except KeyError:
        raise InputError(f"{name}: no [config] table") from None
    unknown = set(conf) - _CONFIG_KEYS
    if unknown:
        raise InputError(
            f"{name}: unknown [config] keys {sorted(unknown)}; known: {sorted(_CONFIG_KEYS)}"
        )
    try:
        cfg = Config(**conf)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name}: bad [config]: {exc}") from None
    timing_conf = dict(data.get("timing", {}))
    if set(timing_conf) - _TIMING_KEYS:
        raise InputError(f"{name}: unknown [timing] keys {sorted(set(timing_conf) - _TIMING_KEYS)}")
    pool = data.get("pool", {})
    sc = Scenario(
        name=str(data.get("name", name)),
        description=str(data.get("description", "")),
        cfg=cfg,
        free=int(pool.get("free", cfg.pool_size)),
        evictable=int(pool.get("evictable", 0)),
        waiting=list(data.get("waiting", [])),
        arrivals=list(data.get("arrivals", [])),
        inflight=list(data.get("inflight", [])),
        chunked=data.get("chunked"),
        timing=Timing(**timing_conf),
        first_round=int(data.get("first_round", 0)),
        start_time=float(data.get("start_time", 0.0)),
        profile=str(data.get("profile", "fork")),
    )
    if "trace" in data:
        from kvforensics.scenario.trace import TraceWorkload

        sc.trace = TraceWorkload.from_table(data["trace"], base=base, cfg=cfg)
    return sc


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such scenario file")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a valid TOML scenario ({exc})") from None
    return parse_scenario(data, name=path.stem, base=path.parent)
