"""Reference driver: one prefill scheduling round through SGLang 0.5.23's own
``PrefillAdder``.

Runs only in the ``.venv-sglang`` interpreter (see ``scripts/conformance_env.sh``);
the project venv never imports this module's SGLang side. The tests in this folder
talk to it through a subprocess (``reference_client.SglangReference`` runs
``python sglang_ref.py --serve``: one JSON round spec per line in, one JSON reply
per line out). ``--json`` takes a JSON list of specs on stdin; ``--self-check``
and ``--bench`` need no input.

What is real and what is a stand-in:

* real: ``PrefillAdder`` (``managers/schedule_policy.py``), its ``PrefillBudget``
  (``mem_cache/prefill_budget.py``), ``Req`` (``managers/schedule_batch.py``),
  ``SamplingParams``, ``AddReqResult``, and the published runtime config of a
  default ``ServerArgs``.
* stand-in allocator (``PagedAllocator``): a count of free pages.
  ``available_size()`` is ``free_pages * page_size``; allocation takes whole pages.
* stand-in prefix tree (``LedgerTree``, a real ``BasePrefixCache`` subclass): one
  number for the evictable tokens. Each queued request's matched device prefix
  is a node; locking a node whose prefix is evictable moves its tokens out of the
  evictable count, unlocking moves them back. ``init_load_back`` allocates the
  host hit's pages from the allocator (evicting first when free pages are short)
  and returns the loaded length, as HiCache does; with too little memory it
  loads nothing (SGLang then recomputes the host part).
* the round loop (``_run_round``) follows ``Scheduler._get_new_batch_prefill_raw``
  of 0.5.23 for a prefill-only (PD prefill) node: resume the chunked request with
  ``add_chunked_req``, then walk the queue, stopping before a candidate when
  ``budget_state()`` is ``OTHER`` and after the first non-``CONTINUE`` result.

A round spec (all sizes in tokens)::

    {"page_size": 64, "chunked_prefill_size": 4096, "max_prefill_tokens": 16384,
     "max_new_tokens": 1, "truncation_align_size": None,
     "free": 12000, "evictable": 0,
     "chunked": None | {"rid": "B", "seq_len": 8000, "start": 3008},
     "queue": [{"rid": "A", "seq_len": 1088, "device_prefix": 0, "host_hit": 0,
                "prefix_evictable": True}, ...]}

Optional keys: ``"skip_rule"``: ``"sglang"`` (default, 0.5.23's loop) or
``"not_continue"`` (skip the whole queue when ``budget_state()`` is not
``CONTINUE`` after a resumed chunk, as accounting.md describes the fork).
``"schedule_policy"`` (default ``"fcfs"``) is published into the config that
``add_one_req`` reads for its one-chunked-request check.

Each call gives one record::

    {"call": "add_chunked_req" | "add_one_req", "rid": str,
     "result": "CONTINUE" | "NO_TOKEN" | "OTHER" | None,
     "decision": "full" | "truncated" | "rejected" | "resumed",
     "start": int | None, "end": int | None,
     "rem_total_tokens": int, "cur_rem_tokens": int, "rem_chunk_tokens": int,
     "rem_total_offset": int, "cur_offset": int, "load_back": int}

``start``/``end`` are the admitted piece ``[prefix, extend_end)`` (``None`` when
rejected); ``load_back`` is the number of host tokens ``init_load_back`` put on
the device; every budget value is read from the adder after the call.
``add_chunked_req`` has no result (``None``); its decision is ``resumed`` (or
``rejected`` if the adder parked it, which the single-pool budget never does).
"""

from __future__ import annotations

import json
import os
import sys
import time
from array import array
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import _stubs  # noqa: E402

_stubs.install()

# Quiet, deterministic SGLang import on a CPU-only machine.
os.environ.setdefault("SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION", "4096")

from sglang.srt.managers.schedule_batch import Req  # noqa: E402
from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder  # noqa: E402
from sglang.srt.mem_cache.allocator.base import BaseTokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import (  # noqa: E402
    BasePrefixCache,
    DecLockRefResult,
    EvictResult,
    IncLockRefResult,
)
from sglang.srt.runtime_context import get_context  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402

SGLANG_VERSION = "0.5.23"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------- stand-ins


class PagedAllocator:
    """Token-to-KV allocator stand-in: a free-page count.

    Duck-types the parts of ``BaseTokenToKVPoolAllocator`` that the adder and its
    budget read; ``create_prefill_budget`` and ``request_slot_reserve`` are the
    real base-class methods, so the adder gets the real ``PrefillBudget``.
    """

    create_prefill_budget = BaseTokenToKVPoolAllocator.create_prefill_budget
    request_slot_reserve = BaseTokenToKVPoolAllocator.request_slot_reserve

    def __init__(self, page_size: int, free_tokens: int):
        self.page_size = page_size
        self.free_pages = free_tokens // page_size
        self.shard_spec = None

    def available_size(self) -> int:
        return self.free_pages * self.page_size

    def full_available_size(self) -> int:
        return self.available_size()

    def alloc_pages(self, n: int) -> bool:
        if n > self.free_pages:
            return False
        self.free_pages -= n
        return True


class _Node:
    __slots__ = ("evictable", "lock_ref", "name", "parent", "tokens")

    def __init__(self, name: str, tokens: int, evictable: bool, parent: _Node | None = None):
        self.name = name
        self.tokens = tokens  # this node's own span
        self.evictable = evictable
        self.lock_ref = 0
        self.parent = parent


class LedgerTree(BasePrefixCache):
    """Prefix-tree stand-in that keeps only the numbers the adder reads."""

    disable = False

    def __init__(self, allocator: PagedAllocator, evictable_tokens: int):
        self.token_to_kv_pool_allocator = allocator
        self.req_to_token_pool = None
        self.page_size = allocator.page_size
        self.evictable = evictable_tokens
        self.root = _Node("root", 0, False)
        self.load_back_calls: list[tuple[str, int]] = []

    # -- sizes the budget reads
    def evictable_size(self) -> int:
        return self.evictable

    def full_evictable_size(self) -> int:
        return self.evictable

    # -- locking: a device prefix leaves the evictable pool while locked. As in the
    # radix tree, a lock holds the node and every ancestor (a loaded span's lock keeps
    # the device prefix under it locked).
    def inc_lock_ref(self, node: _Node) -> IncLockRefResult:
        while node is not None:
            if node.lock_ref == 0 and node.evictable:
                self.evictable -= node.tokens
            node.lock_ref += 1
            node = node.parent
        return IncLockRefResult()

    def dec_lock_ref(self, node: _Node, params: Any = None) -> DecLockRefResult:
        while node is not None:
            node.lock_ref -= 1
            assert node.lock_ref >= 0, node.name
            if node.lock_ref == 0 and node.evictable:
                self.evictable += node.tokens
            node = node.parent
        return DecLockRefResult()

    # -- host load-back: allocates now, so the baseline drops at once
    def init_load_back(self, params):
        req = params.req
        host = params.host_hit_length
        dev = req.prefix_len
        pages = _ceil_div(dev + host, self.page_size) - _ceil_div(dev, self.page_size)
        alloc = self.token_to_kv_pool_allocator
        short = pages - alloc.free_pages
        if short > 0:
            evict_pages = min(short, self.evictable // self.page_size)
            self.evictable -= evict_pages * self.page_size
            alloc.free_pages += evict_pages
        if not alloc.alloc_pages(pages):
            self.load_back_calls.append((req.rid, 0))
            return 0, req.last_node
        # The loaded span is a new node under the device prefix; it is in use
        # (allocated, locked by the request), never evictable this round.
        node = _Node(f"{req.rid}/loaded", host, False, parent=req.last_node)
        self.load_back_calls.append((req.rid, host))
        return host, node

    def load_back_is_cache_owned(self) -> bool:
        return True

    # -- abstract members of SGLang's base class that the adder never calls: reaching one
    # means the harness drives SGLang further than it models, so fail loudly.
    def reset(self):
        _never_called("reset")

    def match_prefix(self, params):
        _never_called("match_prefix")

    def checkpoint(self, req, *, up_to, **kwargs):
        _never_called("checkpoint")

    def evict(self, params) -> EvictResult:
        _never_called("evict")

    def cache_finished_req(self, *args, **kwargs):
        _never_called("cache_finished_req")

    def cache_unfinished_req(self, *args, **kwargs):
        _never_called("cache_unfinished_req")


def _never_called(name: str):
    raise RuntimeError(f"the reference tree's {name}() was called: the harness does not model it")


# --------------------------------------------------------------------------- config

_PUBLISHED: dict[str, Any] = {}


def _publish_config(schedule_policy: str) -> None:
    """Publish a default ServerArgs once per schedule policy (the adder reads the
    exec/schedule/parallel namespaces)."""
    if _PUBLISHED.get("policy") == schedule_policy:
        return
    prev = _PUBLISHED.pop("override", None)
    if prev is not None:
        prev.restore()
    ov = get_context().override_server_args(schedule_policy=schedule_policy)
    ov.install()
    _PUBLISHED.update(policy=schedule_policy, override=ov)


# --------------------------------------------------------------------------- round


def _make_req(rid: str, seq_len: int, max_new_tokens: int) -> Req:
    req = Req(
        rid=rid,
        origin_input_text="",
        origin_input_ids=array("q", [1] * seq_len),
        sampling_params=SamplingParams(max_new_tokens=max_new_tokens),
    )
    req.refresh_fill_ids()
    return req


def validate_round_spec(spec: dict) -> None:
    page = spec["page_size"]
    if page <= 0:
        raise ValueError("page_size must be positive")
    for key in ("free", "evictable", "chunked_prefill_size", "max_prefill_tokens"):
        if spec[key] < 0:
            raise ValueError(f"{key} must be >= 0")
    locked_evictable = 0
    rids = set()
    for q in spec["queue"]:
        if q["rid"] in rids:
            raise ValueError(f"duplicate rid {q['rid']}")
        rids.add(q["rid"])
        if not 0 <= q["device_prefix"] + q["host_hit"] < q["seq_len"]:
            raise ValueError(f"{q['rid']}: need device_prefix + host_hit < seq_len")
        if q.get("prefix_evictable", True):
            locked_evictable += q["device_prefix"]
    if locked_evictable > spec["evictable"]:
        raise ValueError("evictable must cover every evictable device prefix")
    ch = spec.get("chunked")
    if ch is not None and not 0 < ch["start"] < ch["seq_len"]:
        raise ValueError("chunked: need 0 < start < seq_len")


def _record(
    adder: PrefillAdder, call: str, req: Req, result, decision: str, start, end, load_back: int
) -> dict:
    budget = adder.memory_budget
    return {
        "call": call,
        "rid": req.rid,
        "result": None if result is None else result.name,
        "decision": decision,
        "start": start,
        "end": end,
        "rem_total_tokens": int(adder.rem_total_tokens),
        "cur_rem_tokens": int(adder.cur_rem_tokens),
        "rem_chunk_tokens": int(adder.rem_chunk_tokens),
        "rem_total_offset": int(budget.total_offset),
        "cur_offset": int(budget.current_offset),
        "load_back": int(load_back),
    }


def run_sglang_round(round_spec: dict) -> list[dict]:
    """Run one prefill round through SGLang 0.5.23's PrefillAdder; one record per
    adder call (see the module docstring)."""
    validate_round_spec(round_spec)
    _publish_config(round_spec.get("schedule_policy", "fcfs"))
    skip_rule = round_spec.get("skip_rule", "sglang")
    if skip_rule not in ("sglang", "not_continue"):
        raise ValueError(f"unknown skip_rule {skip_rule!r}")

    page = round_spec["page_size"]
    max_new = round_spec["max_new_tokens"]
    allocator = PagedAllocator(page, round_spec["free"])
    tree = LedgerTree(allocator, round_spec["evictable"])

    adder = PrefillAdder(
        page_size=page,
        tree_cache=tree,
        token_to_kv_pool_allocator=allocator,
        running_batch=None,  # prefill node: no decode batch, no reservation
        new_token_ratio=0.0,
        rem_input_tokens=round_spec["max_prefill_tokens"],
        rem_chunk_tokens=round_spec["chunked_prefill_size"],
    )
    records: list[dict] = []

    chunked_req = None
    ch = round_spec.get("chunked")
    resumed = ch is not None
    if resumed:
        req = _make_req(ch["rid"], ch["seq_len"], max_new)
        # Its KV [0, start) is held in its req_to_token row: allocated, not in the
        # tree's evictable part, so it is already outside the baseline.
        req.prefix_len = ch["start"]
        req.kv.req_pool_idx = 0
        req.last_node = tree.root
        start = req.prefix_len
        chunked_req = adder.add_chunked_req(req)
        admitted = req in adder.can_run_list
        records.append(
            _record(
                adder,
                "add_chunked_req",
                req,
                None,
                "resumed" if admitted else "rejected",
                start if admitted else None,
                req.extend_end if admitted else None,
                0,
            )
        )

    if resumed and skip_rule == "not_continue" and (adder.budget_state() != AddReqResult.CONTINUE):
        return records

    for q in round_spec["queue"]:
        if adder.budget_state() == AddReqResult.OTHER:
            break
        req = _make_req(q["rid"], q["seq_len"], max_new)
        # What match_prefix would have set: the device hit, its node, the host hit.
        dev = q["device_prefix"]
        req.prefix_len = dev
        node = _Node(q["rid"], dev, bool(q.get("prefix_evictable", True)) and dev > 0)
        req.last_node = node
        req.best_match_node = node
        req.host_hit_length = q["host_hit"]
        req.num_matched_prefix_tokens = dev + q["host_hit"]
        res = adder.add_one_req(
            req,
            has_chunked_req=chunked_req is not None,
            truncation_align_size=round_spec.get("truncation_align_size"),
        )
        admitted = bool(adder.can_run_list) and adder.can_run_list[-1] is req
        if admitted:
            decision = "truncated" if req.extend_end < q["seq_len"] else "full"
            start, end = req.prefix_len, req.extend_end
        else:
            decision, start, end = "rejected", None, None
        records.append(
            _record(
                adder,
                "add_one_req",
                req,
                res,
                decision,
                start,
                end,
                req.host_loaded_length if admitted else 0,
            )
        )
        if res != AddReqResult.CONTINUE:
            break
    return records


# --------------------------------------------------------------------------- CLI


from _specs import POSTMORTEM_ABC  # noqa: E402  (shared with the tests)


def _bench(seconds: float = 3.0) -> dict:
    """add_one_req decisions per second: rounds of 8 whole admissions."""
    spec = {
        "page_size": 64,
        "chunked_prefill_size": 1 << 30,
        "max_prefill_tokens": 1 << 30,
        "max_new_tokens": 1,
        "truncation_align_size": None,
        "free": 1 << 30,
        "evictable": 1 << 20,
        "chunked": None,
        "queue": [
            {
                "rid": f"r{i}",
                "seq_len": 1000 + 64 * i,
                "device_prefix": 128,
                "host_hit": 64 * (i % 2),
                "prefix_evictable": True,
            }
            for i in range(8)
        ],
    }
    run_sglang_round(spec)  # warm up
    n = calls = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        calls += sum(r["call"] == "add_one_req" for r in run_sglang_round(spec))
        n += 1
    dt = time.perf_counter() - t0
    return {
        "rounds": n,
        "add_one_req_calls": calls,
        "seconds": dt,
        "decisions_per_s": calls / dt,
        "rounds_per_s": n / dt,
    }


def main(argv: list[str]) -> int:
    if "--self-check" in argv:
        recs = run_sglang_round(POSTMORTEM_ABC)
        got = [(r["rid"], r["decision"], r["end"], r["result"]) for r in recs]
        want = [("A", "full", 1088, "CONTINUE"), ("B", "truncated", 3008, "OTHER")]
        if got != want:
            print(f"self-check FAILED: {got}", file=sys.stderr)
            return 1
        print(f"sglang {SGLANG_VERSION} PrefillAdder reference OK")
        return 0
    if "--bench" in argv:
        print(json.dumps(_bench()))
        return 0
    if "--serve" in argv:
        # One JSON round spec per input line -> one JSON line per round, so a
        # property-based test can keep one warm reference process.
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                spec = json.loads(line)
                t0 = time.perf_counter()
                records = run_sglang_round(spec)
                # the round's own time (stand-ins, Req objects and the adder), no I/O
                reply = {"records": records, "seconds": time.perf_counter() - t0}
            except Exception as exc:
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
        return 0
    # --json: a JSON list of round specs on stdin -> a JSON list of record lists
    specs = json.load(sys.stdin)
    out = []
    for spec in specs:
        try:
            out.append({"records": run_sglang_round(spec)})
        except Exception as exc:  # reported per round, so one bad round is visible
            out.append({"error": f"{type(exc).__name__}: {exc}"})
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
