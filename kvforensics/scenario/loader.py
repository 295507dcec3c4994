"""Read a scenario TOML into model objects. The only module of this stage that does I/O."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kvforensics.errors import InputError
from kvforensics.model import Config, Timing
from kvforensics.model.config import SIZE_FIELDS, size_problems
from kvforensics.scenario.schema import OutsideTable, validate_scenario
from kvforensics.scenario.spec import Scenario
from kvforensics.scenario.trace import TraceWorkload

#: rounds one policy's run may take; a scenario that needs more is refused before it
#: runs (each round keeps its record and ledger rows: this bounds memory and time)
MAX_ROUNDS = 100_000


def parse_scenario(
    data: dict[str, Any], *, name: str = "scenario", base: Path | None = None, source: str = ""
) -> Scenario:
    """A scenario from its TOML tables; ``source`` (the file) names it in errors."""
    f = validate_scenario(data, source or name)
    conf = f.config.model_dump()  # type: ignore[attr-defined]  # a model made at run time
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
        sc.trace = TraceWorkload.from_table(f.trace.model_dump(), base=base, cfg=cfg)
    check_work(sc, source or name)
    return sc


def _outside(rows: Iterable[OutsideTable]) -> dict[int, int]:
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
        works = sc.trace.works()
    else:
        specs = [*sc.waiting, *sc.arrivals, *([sc.chunked] if sc.chunked else [])]
        works = [r["seq_len"] - r["prefix_len"] - r["host_hit_len"] for r in specs]
    need = sum(-(-w // chunk) for w in works)
    if need > MAX_ROUNDS:
        raise InputError(
            f"{name}: its requests need at least {need} rounds at chunk {chunk}; a run "
            f"takes at most {MAX_ROUNDS}: shorten the requests or raise chunked_prefill_size"
        )
