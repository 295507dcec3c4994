"""The plan ``kvforensics exec`` performs: a starting pool and the ordered steps of a run.

A plan is plain data (no torch), so any source can build one: a model run of a scenario
today, a replay of a log later. It deliberately carries *what was asked for* (locks,
load-backs, each round's batch of pieces, releases) and not what the model concluded:
evictions and the out-of-memory are left for the executor's own allocator to re-derive.
The model's out-of-memory is kept aside (``model_oom``) only to compare against.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kvforensics.errors import InputError

if TYPE_CHECKING:  # the model is only needed to build a plan from a run
    from kvforensics.model import PagePool, PoolOp, RunResult
    from kvforensics.model.node import OutOfMemory
    from kvforensics.replay import ReplayOptions

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PoolSnapshot:
    """The pool before the first step, in tokens.

    ``evictable`` is in eviction order (oldest first); ``held`` is what requests already
    hold (inflight transfers, a half-done chunked request).
    """

    size: int
    page_size: int
    free: int
    evictable: tuple[tuple[str, int], ...] = ()
    held: tuple[tuple[str, int], ...] = ()
    cache_kind: str = "hybrid"

    def as_dict(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "page_size": self.page_size,
            "free": self.free,
            "evictable": [list(e) for e in self.evictable],
            "held": [list(h) for h in self.held],
            "cache_kind": self.cache_kind,
        }


@dataclass(frozen=True, slots=True)
class Step:
    """One thing to do to the pool.

    kind: ``lock``/``unlock`` (entry ``key``), ``load_back`` (slots for host-cache tokens
    [start, end) of ``owner``, copied in from the host), ``batch`` (a round's pieces,
    allocated all-or-nothing, then computed and written), ``release`` (``owner``'s slots
    become the cache ``entries``; what no entry covers goes back to free).
    """

    round: int
    kind: str
    owner: str = ""
    key: str = ""
    start: int = 0
    end: int = 0
    pieces: tuple[tuple[str, int, int], ...] = ()
    entries: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ExecOom:
    """An out-of-memory: the round, the request it is pinned on, the tokens asked for and
    those available (the executor's, or the model's to compare it against)."""

    round: int
    rid: str
    tokens: int
    available: int

    @classmethod
    def of(cls, oom: OutOfMemory) -> ExecOom:
        return cls(oom.round, oom.rid, oom.tokens, oom.available)

    def as_dict(self) -> dict[str, Any]:
        return {"round": self.round, "rid": self.rid, "tokens": self.tokens,
                "available": self.available}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Plan:
    snapshot: PoolSnapshot
    steps: tuple[Step, ...]
    #: rid -> seq_len, when the source knows it: lets the executor say who completed
    seq_lens: dict[str, int] = field(default_factory=dict)
    #: the source's own out-of-memory, to compare
    model_oom: ExecOom | None = None
    name: str = ""
    policy: str = ""
    #: what the log reader could not read (cut gzip, cut last line, ...), to pass on
    log_notes: tuple[str, ...] = ()

    @property
    def rounds(self) -> list[int]:
        return sorted({s.round for s in self.steps if s.kind == "batch"})


def snapshot_pool(pool: PagePool) -> PoolSnapshot:
    """Copy a model pool's state before it runs (reads the eviction order it keeps)."""
    return PoolSnapshot(
        size=pool.size,
        page_size=pool.page_size,
        free=pool.free,
        evictable=pool.evictable_entries(),
        held=tuple(pool.held.items()),
        cache_kind=pool.cache_kind,
    )


def plan_from_run(
    snapshot: PoolSnapshot,
    ops: Sequence[PoolOp],
    cfg: Any = None,
    *,
    attempted: Iterable[tuple[int, str, int, int]] = (),
    seq_lens: dict[str, int] | None = None,
    model_oom: ExecOom | None = None,
    name: str = "",
    policy: str = "",
) -> Plan:
    """Turn a pool's op list into a plan.

    ``ops``: anything with ``round, op, owner, key, start, end, tokens`` (the model's
    ``PoolOp``). Consecutive ``alloc`` ops of one round are one batch (SGLang allocates a
    batch at once). ``evict`` ops are dropped: the executor evicts on its own. An ``oom`` op
    only marks *where* the failed round's batch goes; the pieces of that batch are not in
    the ops (nothing was allocated), so they come from ``attempted`` as
    ``(round, rid, start, end)``: what the scheduler asked for in a round whose allocation
    is missing from ``ops``. ``cfg`` (page and pool size) only cross-checks the snapshot.
    """
    if cfg is not None and (cfg.page_size != snapshot.page_size or cfg.pool_size != snapshot.size):
        raise InputError(
            f"plan: snapshot (page {snapshot.page_size}, pool {snapshot.size}) does not match "
            f"the config (page {cfg.page_size}, pool {cfg.pool_size})"
        )
    pending: dict[int, list[tuple[str, int, int]]] = {}
    for rnd, rid, s, e in attempted:
        pending.setdefault(int(rnd), []).append((str(rid), int(s), int(e)))
    steps = _steps_from_ops(ops, pending)
    for rnd in sorted(pending):  # a source without an oom marker: the batch comes last
        steps.append(Step(rnd, "batch", pieces=tuple(pending[rnd])))
    return Plan(
        snapshot=snapshot,
        steps=tuple(steps),
        seq_lens=dict(seq_lens or {}),
        model_oom=model_oom,
        name=name,
        policy=policy,
    )


def _steps_from_ops(ops: Sequence[PoolOp], pending: dict[int, list[Any]]) -> list[Step]:
    """The ops as steps: runs of allocations grouped into batches, evictions dropped, and
    each ``oom`` marker replaced by its round's attempted batch (taken out of ``pending``)."""
    steps: list[Step] = []
    batch: list[tuple[str, int, int]] = []
    batch_round = -1
    for op in ops:
        kind = op.op
        if kind == "evict":
            continue  # the executor's allocator decides what to evict
        if kind == "alloc":
            if batch and op.round != batch_round:
                steps.append(Step(batch_round, "batch", pieces=tuple(batch)))
                batch = []
            batch_round = op.round
            batch.append((op.owner, op.start, op.end))
            continue
        if batch:
            steps.append(Step(batch_round, "batch", pieces=tuple(batch)))
            batch = []
        if kind in ("lock", "unlock"):
            steps.append(Step(op.round, kind, key=op.key))
        elif kind == "load_back":
            steps.append(Step(op.round, kind, owner=op.owner, start=op.start, end=op.end))
        elif kind in ("release", "free"):
            _add_release(steps, op)
        elif kind == "oom":
            pieces = pending.pop(op.round, None)
            if pieces:
                steps.append(Step(op.round, "batch", pieces=tuple(pieces)))
        else:
            raise InputError(f"plan: unknown pool op {kind!r}")
    if batch:
        steps.append(Step(batch_round, "batch", pieces=tuple(batch)))
    return steps


def _add_release(steps: list[Step], op: PoolOp) -> None:
    """One model release() is a run of release ops plus maybe a free op for one owner:
    fold them into one step whose leftover goes back to free."""
    prev = steps[-1] if steps else None
    entry = ((op.key, op.tokens),) if op.op == "release" else ()
    if prev is not None and prev.kind == "release" and prev.owner == op.owner:
        steps[-1] = Step(prev.round, "release", owner=op.owner, entries=prev.entries + entry)
    else:
        steps.append(Step(op.round, "release", owner=op.owner, entries=entry))


_ADMITTED = ("resumed", "full", "truncated")


def attempted_from_ledger(result: RunResult) -> list[tuple[int, str, int, int]]:
    """Pieces the adder decided in rounds that allocated nothing (the failed round).

    These are the adder's decisions (who computes what), not the allocator's verdict.
    """
    allocated = {op.round for op in result.pool.ops if op.op == "alloc"}
    return [
        (_always(s.round), _always(s.rid), _always(s.start), _always(s.end))
        for s in result.ledger.rows
        if s.decision in _ADMITTED and s.round not in allocated
    ]


def _always(value: T | None) -> T:
    """A field an admitted adder step always holds (its round, request and piece): the
    ledger's ``Step`` makes every field optional for the kinds of step that lack it."""
    assert value is not None
    return value


def plan_from_result(snapshot: PoolSnapshot, result: RunResult, cfg: Any = None, **kw: Any) -> Plan:
    """A plan from a finished model run (its ops, and its ledger for the failed round)."""
    return plan_from_run(
        snapshot,
        result.pool.ops,
        cfg,
        attempted=attempted_from_ledger(result),
        seq_lens={rid: r.seq_len for rid, r in result.requests.items()},
        model_oom=ExecOom.of(result.oom) if result.oom is not None else None,
        policy=result.policy,
        **kw,
    )


def plan_from_scenario(path: str, policy: str) -> Plan:
    """Run a scenario TOML through the model under ``policy`` and plan its re-execution."""
    from kvforensics.scenario import load_scenario

    sc = load_scenario(path)
    try:
        node = sc.build_node(policy)
    except ValueError as exc:  # unknown policy
        raise InputError(str(exc)) from None
    snap = snapshot_pool(node.pool)
    return plan_from_result(snap, node.run(), sc.cfg, name=sc.name)


def plan_from_replay(
    paths: Sequence[str | Path], policy: str, options: ReplayOptions | None = None
) -> Plan:
    """Replay logs, streamed, then plan the re-execution of ``policy`` from the replay's
    start round (``options``: how the logs are read: sizes, rank, formats, transfer time)."""
    from kvforensics.replay import ReplayOptions, replay_logs

    given = options or ReplayOptions()
    rr = replay_logs([Path(p) for p in paths], replace(given, policies=(policy,), stream=True))
    if rr.builder is None:
        raise InputError("these logs hold no round to replay")
    node = rr.builder.build(policy)
    snap = snapshot_pool(node.pool)
    name = f"{Path(paths[0]).name} from round {rr.start_round}"
    plan = plan_from_result(snap, node.run(), rr.rebuild.cfg, name=name)
    return replace(plan, log_notes=tuple(rr.summary.notes()))
