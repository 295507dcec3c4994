"""``execute(plan)``: perform a plan's steps on a real KV cache and say what happened.

The allocator decides on its own whether a batch fits; the model's out-of-memory is read
only at the end, to compare. Integrity is checked after every round and at the end.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kvforensics.exec import content
from kvforensics.exec.allocator import KvOutOfMemory, PageAllocator
from kvforensics.exec.kvcache import KvCache, KvLayout
from kvforensics.exec.limits import check_fits
from kvforensics.exec.plan import ExecOom, Plan
from kvforensics.exec.plan import Step as PlanStep
from kvforensics.exec.store import get_store, resolve

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def default_layout(
    device: str,
    layers: int | None,
    kv_dim: int | None,
    rope_dim: int | None,
    dtype: torch.dtype = torch.bfloat16,
) -> KvLayout:
    """Full size on CUDA (61 layers, 512 + 64); on CPU 1 layer of width 8, which keeps the
    slot count, and so the out-of-memory point, exact and runs in seconds."""
    cuda = device.startswith("cuda")
    return KvLayout(
        layers=layers if layers is not None else (61 if cuda else 1),
        kv_lora_rank=kv_dim if kv_dim is not None else (512 if cuda else 8),
        rope_dim=rope_dim if rope_dim is not None else (64 if cuda else 0),
        dtype=dtype,
    )


@dataclass(frozen=True, slots=True)
class ExecStats:
    """What the run did to the pool and the cache."""

    slots: int
    page_size: int
    kv_bytes: int
    rows_written: int
    rows_loaded_back: int
    pages_evicted: int
    pages_reused: int
    setup_ms: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "slots": self.slots,
            "page_size": self.page_size,
            "kv_bytes": self.kv_bytes,
            "rows_written": self.rows_written,
            "rows_loaded_back": self.rows_loaded_back,
            "pages_evicted": self.pages_evicted,
            "pages_reused": self.pages_reused,
            "setup_ms": self.setup_ms,
        }


@dataclass
class ExecResult:
    name: str
    policy: str
    device: str
    backend: str
    layout: KvLayout
    oom: ExecOom | None
    oom_message: str | None
    model_oom: ExecOom | None
    integrity: list[str]
    rounds: int
    seconds: float
    stats: ExecStats
    completed: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: what the log reader could not read, from the plan
    log_notes: list[str] = field(default_factory=list)
    kv_digest: str | None = None
    #: the KV tensor at the end (``keep_kv=True``), for comparing backends
    kv: Any = None

    @property
    def agrees_with_model(self) -> bool:
        return self.oom == self.model_oom

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "policy": self.policy,
            "device": self.device,
            "backend": self.backend,
            "layout": self.layout.as_dict(),
            "oom": self.oom.as_dict() if self.oom else None,
            "oom_message": self.oom_message,
            "model_oom": self.model_oom.as_dict() if self.model_oom else None,
            "agrees_with_model": self.agrees_with_model,
            "integrity": self.integrity or "ok",
            "rounds": self.rounds,
            "completed": self.completed,
            "incomplete": self.incomplete,
            "stats": self.stats.as_dict(),
            "notes": self.notes,
            "log_notes": self.log_notes,
            "kv_digest": self.kv_digest,
            "seconds": round(self.seconds, 4),
        }


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class _Execution:
    """The state of one plan being performed: the allocator, the KV cache and what the
    run has seen so far (who got slots first, how far each request was written)."""

    def __init__(
        self, plan: Plan, alloc: PageAllocator, cache: KvCache, hosts: dict[int, torch.Tensor]
    ) -> None:
        self.plan, self.alloc, self.cache, self.hosts = plan, alloc, cache, hosts
        self.failures: list[str] = []
        self.first_round: dict[str, int] = dict.fromkeys((r for r, _ in plan.snapshot.held), -1)
        self.written_end: dict[str, int] = {}
        self.rounds = 0
        self.loaded = 0
        self.oom: ExecOom | None = None
        self.oom_msg: str | None = None

    def check(self, label: str) -> None:
        """Integrity: the allocator's own structure, then every live row read back."""
        alloc, cache = self.alloc, self.cache
        self.failures.extend(f"{label}: {p}" for p in alloc.check_structure())
        self.failures.extend(
            f"{label}: {p}" for p in cache.check(alloc.holders(), self.plan.snapshot.page_size)
        )

    def run(self, check_rounds: bool, on_step: Callable[[int, int], None] | None) -> None:
        """Every step in order, until the plan ends or the allocator runs out of memory."""
        total = len(self.plan.steps)
        for i, step in enumerate(self.plan.steps):
            try:
                self._do(i, step, check_rounds)
            except _Blamed as exc:
                self.oom, self.oom_msg = exc.oom(), str(exc.error)
                break
            except KvOutOfMemory as exc:  # a load-back that did not fit
                self.oom = ExecOom(step.round, step.owner, exc.tokens, exc.available)
                self.oom_msg = str(exc)
                break
            if on_step is not None:
                on_step(i + 1, total)
        self.check("end")

    def _do(self, i: int, step: PlanStep, check_rounds: bool) -> None:
        alloc = self.alloc
        if step.kind == "lock":
            alloc.lock(step.key)
        elif step.kind == "unlock":
            alloc.unlock(step.key)
        elif step.kind == "release":
            alloc.release(step.owner, step.entries)
        elif step.kind == "load_back":
            self.first_round.setdefault(step.owner, step.round)
            runs = alloc.alloc(step.owner, step.start, step.end)
            self.cache.load_back(runs, self.hosts.pop(i), step.start)
            self.loaded += step.end - step.start
        elif step.kind == "batch":
            self._batch(step)
            if check_rounds:
                self.check(f"round {step.round}")
        else:
            raise ValueError(f"unknown step kind {step.kind!r}")

    def _batch(self, step: PlanStep) -> None:
        """A round's pieces: allocated at once, all of them or out of memory, then written."""
        alloc = self.alloc
        self.rounds += 1
        if not alloc.fits(alloc.batch_pages(step.pieces)):
            victim = _victim(step.pieces, self.first_round, step.round)
            tokens = sum(e - s for _, s, e in step.pieces)
            raise _Blamed(alloc.out_of_memory(tokens), step.round, victim)
        for rid, s, e in step.pieces:
            self.first_round.setdefault(rid, step.round)
            self.cache.write(alloc.alloc(rid, s, e))
            self.written_end[rid] = max(self.written_end.get(rid, 0), e)


def execute(
    plan: Plan,
    *,
    device: str | None = None,
    backend: str = "auto",
    layers: int | None = None,
    kv_dim: int | None = None,
    rope_dim: int | None = None,
    dtype: torch.dtype = torch.bfloat16,
    check_rounds: bool = True,
    allocator_cls: type[PageAllocator] = PageAllocator,
    on_step: Callable[[int, int], None] | None = None,
    keep_kv: bool = False,
) -> ExecResult:
    """Perform ``plan`` on a KV cache of ``plan.snapshot.size`` slots.

    ``check_rounds``: read back every live row after each round (always at the end).
    ``allocator_cls``: for tests that break the allocator on purpose.
    ``keep_kv``: return the final KV tensor on the result.
    """
    t0 = time.perf_counter()
    device, backend = resolve(device, backend)
    layout = default_layout(device, layers, kv_dim, rope_dim, dtype)
    check_fits(plan, layout, device)  # before anything is allocated
    snap = plan.snapshot
    alloc = allocator_cls(snap, content.seed_of)
    cache = KvCache(layout, snap.size, device, get_store(backend))
    cache.write(alloc.initial_content())  # the cache and inflight KV that exist at the start
    # The host cache exists before the run (HiCache wrote it earlier): build it up front.
    hosts = {
        i: cache.host_rows(content.seed_of(s.owner), s.start, s.end)
        for i, s in enumerate(plan.steps)
        if s.kind == "load_back"
    }
    _sync(device)
    setup_s = time.perf_counter() - t0
    run = _Execution(plan, alloc, cache, hosts)
    run.run(check_rounds, on_step)
    _sync(device)
    return _result(run, device, backend, layout, time.perf_counter() - t0, setup_s, keep_kv)


def _result(
    run: _Execution,
    device: str,
    backend: str,
    layout: KvLayout,
    seconds: float,
    setup_s: float,
    keep_kv: bool,
) -> ExecResult:
    plan, alloc, cache, snap = run.plan, run.alloc, run.cache, run.plan.snapshot
    seq = plan.seq_lens
    completed = sorted(r for r in seq if run.written_end.get(r, 0) >= seq[r])
    return ExecResult(
        name=plan.name,
        policy=plan.policy,
        device=device,
        backend=backend,
        layout=layout,
        oom=run.oom,
        oom_message=run.oom_msg,
        model_oom=plan.model_oom,
        integrity=run.failures,
        rounds=run.rounds,
        seconds=seconds,
        completed=completed,
        incomplete=sorted(set(seq) - set(completed)),
        stats=ExecStats(
            slots=snap.size,
            page_size=snap.page_size,
            kv_bytes=snap.size * layout.bytes_per_slot(),
            rows_written=cache.rows_written,
            rows_loaded_back=run.loaded,
            pages_evicted=alloc.evicted_pages,
            pages_reused=alloc.reused_pages,
            setup_ms=round(setup_s * 1000, 1),
        ),
        notes=alloc.notes,
        log_notes=list(plan.log_notes),
        kv_digest=_digest(cache.kv),
        kv=cache.kv if keep_kv else None,
    )


def _digest(kv: torch.Tensor) -> str | None:
    """sha256 of the whole pool's bytes, to compare backends across processes (the
    interpreter runs in its own). Skipped past 1 GiB: hashing 18 GB on the host is slow."""
    if kv.numel() * kv.element_size() > 1 << 30:
        return None
    return hashlib.sha256(kv.cpu().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


class _Blamed(Exception):
    def __init__(self, error: KvOutOfMemory, rnd: int, rid: str):
        super().__init__(str(error))
        self.error, self.round, self.rid = error, rnd, rid

    def oom(self) -> ExecOom:
        return ExecOom(self.round, self.rid, self.error.tokens, self.error.available)


def _victim(pieces: Sequence[tuple[str, int, int]], first_round: dict[str, int], rnd: int) -> str:
    """Whom the out-of-memory is pinned on: a request that got slots in an earlier round
    (its later pieces were promised when it was admitted), else the batch's last piece."""
    for rid, _s, _e in pieces:
        if first_round.get(rid, rnd) < rnd:
            return rid
    return pieces[-1][0]
