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
from kvforensics.model.config import SIZE_FIELDS, size_problems
from kvforensics.scenario.schema import validate_scenario

#: rounds one policy's run may take; a scenario that needs more is refused before it
#: runs (each round keeps its record and ledger rows: this bounds memory and time)
MAX_ROUNDS = 100_000


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
            return PrefillNode.from_state(
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


def parse_scenario(
    data: dict[str, Any], *, name: str = "scenario", base: Path | None = None, source: str = ""
) -> Scenario:
    """A scenario from its TOML tables; ``source`` (the file) names it in errors."""
    f = validate_scenario(data, source or name)
    conf = f.config.model_dump()
    problems = size_problems({k: conf[k] for k in SIZE_FIELDS})
    if problems:
        key, why = problems[0]
        raise InputError(
            f"{source or name}: config.{key}: {conf[key]} {why}; fix the scenario file"
        )
    cfg = Config(**conf)
    free = cfg.pool_size if f.pool.free is None else f.pool.free
    if free + f.pool.evictable > cfg.pool_size:
        raise InputError(
            f"{source or name}: pool: free {free} + evictable {f.pool.evictable} exceed "
            f"config.pool_size {cfg.pool_size}; fix the scenario file"
        )
    sc = Scenario(
        name=f.name if f.name is not None else name,
        description=f.description,
        cfg=cfg,
        free=free,
        evictable=f.pool.evictable,
        waiting=[r.model_dump() for r in f.waiting],
        arrivals=[r.model_dump() for r in f.arrivals],
        inflight=[r.model_dump() for r in f.inflight],
        chunked=f.chunked.model_dump() if f.chunked is not None else None,
        timing=Timing(**f.timing.model_dump()),
        first_round=f.first_round,
        start_time=f.start_time,
        profile=f.profile,
        outside=_outside(f.outside),
    )
    if f.trace is not None:
        from kvforensics.scenario.trace import TraceWorkload

        sc.trace = TraceWorkload.from_table(f.trace.model_dump(), base=base, cfg=cfg)
    check_work(sc, source or name)
    return sc


def _outside(rows) -> dict[int, int]:
    """``[[outside]]`` rows as round -> tokens (two rows for one round add up)."""
    out: dict[int, int] = {}
    for o in rows:
        out[o.before_round] = out.get(o.before_round, 0) + o.tokens
    return out


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such scenario file")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a valid TOML scenario ({exc})".splitlines()[0]) from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return parse_scenario(data, name=path.stem, base=path.parent, source=str(path))


def check_work(sc: Scenario, name: str) -> None:
    """Refuse a scenario whose requests need more rounds than a run may take: each
    request takes at least ``ceil(work / chunk)`` rounds (work = tokens it computes)."""
    chunk = min(sc.cfg.chunked_prefill_size, sc.cfg.max_prefill_tokens)
    if sc.trace is not None:
        works = [row.input_length for row in sc.trace.rows]
    else:
        specs = [*sc.waiting, *sc.arrivals, *([sc.chunked] if sc.chunked else [])]
        works = [r["seq_len"] - r["prefix_len"] - r["host_hit_len"] for r in specs]
    need = sum(-(-w // chunk) for w in works)
    if need > MAX_ROUNDS:
        raise InputError(
            f"{name}: its requests need at least {need} rounds at chunk {chunk}; a run "
            f"takes at most {MAX_ROUNDS}: shorten the requests or raise chunked_prefill_size"
        )
