"""Multi-round differential: the same prefill node through SGLang 0.5.23's real prefill
path (``sglang_multi.py``: real allocator, ``ReqToTokenPool``, ``RadixCache``, the
scheduler's ``_get_new_batch_prefill_raw`` on a stand-in scheduler, ``prepare_for_extend``,
checkpoint and release after the transfer) and through the model (``PrefillNode`` with
profile ``sglang-0.5.23``, policy ``upstream``, ``RadixPagePool`` with
``RadixPrefixCache``), compared round by round: every adder call (decision, piece, the
remaining budgets, both offsets), the batch's pieces, free and evictable right after
allocation, the tokens evicted, and an out-of-memory's numbers.

Runs are built from the Mooncake conversation trace (``fixtures/traces/``): a window of
consecutive rows gives the requests, their block hashes become shared token prefixes
(block ``h`` is the same tokens in every request that has it), their lengths are scaled
down to keep runs small. Outside allocations (another user of the pool) land between
rounds, or between the adder's decisions and the batch's allocation, the way an
out-of-memory happens.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from functools import cache

from hypothesis import strategies as st

from kvforensics.model.config import Config
from kvforensics.model.node import OutOfMemory, PrefillNode, Timing
from kvforensics.model.policies import get_policy
from kvforensics.model.pool import PagePool
from kvforensics.model.prefix_cache import RadixPrefixCache
from kvforensics.model.profiles import get_profile
from kvforensics.model.radix import RadixPagePool
from kvforensics.model.request import Request

from .model_round import RecordingLedger
from .reference_client import ROOT, diff_records

TRACE = ROOT / "fixtures" / "traces" / "conversation_trace.jsonl"
PROFILE, POLICY = "sglang-0.5.23", "upstream"
#: what is compared after each round besides the adder calls
ROUND_FIELDS = ("pieces", "free", "evictable", "evicted")
_OOM = re.compile(r"Try to allocate (\d+) tokens\.\s*\nAvailable tokens: (\d+) "
                  r"\(available_size=(\d+) \+ evictable_size=(\d+)\)")  # fmt: skip


@cache
def trace_rows() -> list[tuple[int, tuple[int, ...]]]:
    rows = []
    for line in TRACE.read_text().splitlines():
        obj = json.loads(line)
        rows.append((int(obj["input_length"]), tuple(obj["hash_ids"])))
    return rows


@st.composite
def run_specs(draw, *, max_requests: int = 8, shared: bool = True, ample: bool = False) -> dict:
    """A run from a window of the trace. ``shared=False`` gives every request whole blocks
    of its own (no prefix is shared); ``ample`` a pool that holds every request at once and
    no outside user (nothing is ever evicted). Together: the narrow domain the model was
    first exact in, before it had the radix tree (docs/sglang-0.5.23-rules.md,
    "Multi-round differential")."""
    rows = trace_rows()
    page = draw(st.sampled_from([1, 16, 64]))
    block = draw(st.sampled_from([64, 128]))
    scale = 512 // block  # trace lengths are in 512-token blocks
    first = draw(st.integers(0, len(rows) - max_requests))
    n = draw(st.integers(1, max_requests))
    requests, arrive = [], 0
    for i in range(n):
        length, blocks = rows[first + i]
        seq = max(2, min(length // scale, len(blocks) * block))
        if not shared:  # whole blocks: a finished request leaves no partial page
            seq = max(block, seq // block * block)
        own = list(blocks[: -(-seq // block)])
        if not shared:
            own = [h + (i + 1) * 10**7 for h in own]
        requests.append({"rid": f"r{i}", "arrive": arrive, "seq_len": seq, "blocks": own})
        arrive += draw(st.integers(0, 2))
    demand = sum(r["seq_len"] for r in requests)
    chunk = page * draw(st.integers(1, max(1, 1024 // page)))
    lo = demand + len(requests) * 2 * page if ample else demand // 3
    pool = page * draw(st.integers(max(1, lo // page), max(2, 2 * demand // page, lo // page)))
    outside = []
    for _ in range(0 if ample else draw(st.integers(0, 2))):
        outside.append({"round": draw(st.integers(0, arrive + 6)),
                        "tokens": page * draw(st.integers(1, max(1, pool // page // 2))),
                        "rounds": draw(st.integers(1, 4)),
                        "during": draw(st.booleans())})  # fmt: skip
    return {
        "page_size": page, "pool_size": pool, "chunked_prefill_size": chunk,
        "max_prefill_tokens": draw(st.sampled_from([chunk, 2 * chunk, 16384])),
        "max_new_tokens": 1, "transfer_rounds": draw(st.integers(1, 3)),
        "block_size": block, "rounds": arrive + 12, "requests": requests,
        "outside": outside,
    }  # fmt: skip


class _OutsidePool(RadixPagePool):
    """The model's pool, with outside allocations that land between the adder's
    decisions and the batch's allocation (``during``), and free and evictable read right
    after the batch's allocation (``after_alloc``: before the checkpoints, as the
    reference reads them)."""

    __slots__ = ("after_alloc", "during")

    def alloc_batch(self, pieces):
        for owner, tokens in self.during:
            take_outside(self, owner, tokens)
        self.during = []
        out = super().alloc_batch(pieces)
        self.after_alloc = (self.available_size(), self.evictable_size())
        return out


def take_outside(pool: PagePool, owner: str, tokens: int) -> None:
    # Like the reference's allocator.alloc: free slots only, no eviction, or nothing.
    if tokens <= pool.free:
        pool.free -= tokens
        pool.hold(owner, tokens)


class ModelRun:
    """The model's node, stepped on the reference's round clock (round n at time n)."""

    def __init__(self, spec: dict):
        page = spec["page_size"]
        self.spec = spec
        self.cfg = cfg = Config(
            page_size=page, chunked_prefill_size=spec["chunked_prefill_size"],
            max_prefill_tokens=spec["max_prefill_tokens"], pool_size=spec["pool_size"],
            truncation_align_size=0, max_new_tokens=spec["max_new_tokens"], cache_kind="radix",
        )  # fmt: skip
        self.pool = _OutsidePool(page_size=page, size=spec["pool_size"], free=spec["pool_size"])
        self.pool.during = []
        cache = RadixPrefixCache(cfg, self.pool, block_size=spec["block_size"])
        arrivals = []
        for r in spec["requests"]:
            cache.add(r["rid"], tuple(r["blocks"]))
            arrivals.append(Request(r["rid"], r["seq_len"], arrival=float(r["arrive"])))
        timing = Timing(transfer_latency_s=float(spec["transfer_rounds"]))
        self.node = PrefillNode(cfg, get_policy(POLICY), self.pool, arrivals=arrivals,
                                timing=timing, profile=get_profile(PROFILE), prefix_cache=cache)  # fmt: skip
        self.outside: list[tuple[int, str]] = []

    def _between_rounds(self, now: int) -> None:
        node, pool = self.node, self.pool
        node.now = float(now)
        node._absorb()
        for end, owner in [o for o in self.outside if o[0] <= now]:
            pool.free += pool.held.pop(owner, 0)
            self.outside.remove((end, owner))
        for i, o in enumerate(self.spec.get("outside", ())):
            if o["round"] != now:
                continue
            owner = f"outside{i}"
            if o.get("during"):
                pool.during.append((owner, o["tokens"]))
            else:
                take_outside(pool, owner, o["tokens"])
            self.outside.append((now + o.get("rounds", 1), owner))

    def round(self, now: int) -> dict:
        self._between_rounds(now)
        node, pool = self.node, self.pool
        ledger = RecordingLedger(pool)
        node.ledger = ledger
        n_ops = len(pool.ops)
        pool.after_alloc = None
        t0 = time.perf_counter()
        out = None
        if node.chunked is not None or node.waiting:
            node.round = now
            out = node.step()
        for owner, tokens in pool.during:  # no batch: the outside user still takes them
            take_outside(pool, owner, tokens)
        pool.during = []
        dt = time.perf_counter() - t0
        calls = ledger.records
        evicted = sum(op.tokens for op in pool.ops[n_ops:] if op.op == "evict")
        oom = out if isinstance(out, OutOfMemory) else None
        pieces = [[c["rid"], c["start"], c["end"]] for c in calls if c["start"] is not None]
        free, evictable = pool.after_alloc or (pool.available_size(), pool.evictable_size())
        return {
            "round": now, "calls": calls, "pieces": pieces,
            "free": free, "evictable": evictable,
            "evicted": evicted, "new_token": sum(e - s for _, s, e in pieces),
            "oom": None if oom is None else [oom.tokens, oom.available_size, oom.evictable_size],
            "seconds": dt,
        }  # fmt: skip


def model_run(spec: dict) -> list[dict]:
    run = ModelRun(spec)
    out = []
    for now in range(spec["rounds"]):
        rec = run.round(now)
        out.append(rec)
        if rec["oom"]:
            break
    return out


def oom_numbers(message: str | None) -> list[int] | None:
    """(tokens, available_size, evictable_size) of SGLang's out-of-memory message."""
    if not message:
        return None
    m = _OOM.search(message)
    if m is None:
        raise ValueError(f"unrecognised out-of-memory message: {message!r}")
    return [int(m.group(1)), int(m.group(3)), int(m.group(4))]


@dataclass(slots=True)
class RunOutcome:
    diffs: list[str]
    rounds: int
    decisions: int
    sglang_seconds: float
    model_seconds: float


def diff_runs(expected: list[dict], actual: list[dict]) -> list[str]:
    """Round-by-round differences (the first differing round and everything in it)."""
    for e, a in zip(expected, actual, strict=False):
        out = [f"round {e['round']}: {d}" for d in diff_records(e["calls"], a["calls"])]
        for f in ROUND_FIELDS:
            if e[f] != a[f]:
                out.append(f"round {e['round']}: {f}: reference {e[f]!r} vs model {a[f]!r}")
        if oom_numbers(e["oom"]) != a["oom"]:
            out.append(f"round {e['round']}: out of memory: reference "
                       f"{oom_numbers(e['oom'])} vs model {a['oom']}")  # fmt: skip
        if out:
            return out
    if len(expected) != len(actual):
        return [f"rounds: reference {len(expected)} vs model {len(actual)}"]
    return []


def compare_run(ref, spec: dict) -> RunOutcome:
    expected = ref.run(spec)
    got = model_run(spec)
    return RunOutcome(
        diff_runs(expected, got),
        len(expected),
        sum(len(r["calls"]) for r in expected),
        sum(r["seconds"] for r in expected),
        sum(r["seconds"] for r in got),
    )
