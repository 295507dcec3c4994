"""Reference driver: one prefill scheduling round through an SGLang release's own
``PrefillAdder`` (0.5.23 in ``.venv-sglang``; 0.5.9 to 0.5.22 in
``.venv-sglang-<release>``; ``_release.py`` holds the few places where releases' APIs
differ, ``docs/sglang-releases.md`` their rules).

Runs only in a reference interpreter (see ``scripts/conformance_env.sh``);
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
  loads nothing (SGLang then recomputes the host part). The loaded span is cache
  (evictable) until the request's lock takes it. Before 0.5.22 ``match_prefix``
  answers ``Req.init_next_round_input`` with the spec's device prefix and host hit.
* the round loop (``run_sglang_round``) follows the release's
  ``Scheduler._get_new_batch_prefill_raw`` for a prefill-only (PD prefill) node:
  resume the chunked request with ``add_chunked_req``, then walk the queue, stopping
  before a candidate when ``budget_state()`` is ``OTHER`` (0.5.23 only) and after the
  first non-``CONTINUE`` result.

A round spec (all sizes in tokens)::

    {"page_size": 64, "chunked_prefill_size": 4096, "max_prefill_tokens": 16384,
     "max_new_tokens": 1, "truncation_align_size": None,
     "free": 12000, "evictable": 0,
     "chunked": None | {"rid": "B", "seq_len": 8000, "start": 3008},
     "queue": [{"rid": "A", "seq_len": 1088, "device_prefix": 0, "host_hit": 0,
                "prefix_evictable": True}, ...]}

Optional keys: ``"skip_rule"``: ``"sglang"`` (default, the release's loop) or
``"not_continue"`` (skip the whole queue when ``budget_state()`` is not
``CONTINUE`` after a resumed chunk, as docs/accounting.md describes the fork).
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
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

# _release installs the import stand-ins (_stubs.py) and shims, then imports SGLang.
from _release import (  # noqa: E402
    LOOP_BREAKS_ON_OTHER,
    MODERN,
    SGLANG_VERSION,
    AddReqResult,
    BasePrefixCache,
    PrefillAdder,
    Req,
    SamplingParams,
    allocator_base_methods,
    loaded_indices,
    lock_results,
    make_input_ids,
    match_result,
    offsets,
    piece,
    publish_config,
)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------- stand-ins


class PagedAllocator:
    """Token-to-KV allocator stand-in: a free-page count.

    Duck-types the parts of ``BaseTokenToKVPoolAllocator`` that the adder and its
    budget read; from 0.5.22 ``create_prefill_budget`` and ``request_slot_reserve``
    are the real base-class methods, so the adder gets the real ``PrefillBudget``.
    """

    locals().update(allocator_base_methods())

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


_IncLockRefResult, _DecLockRefResult = lock_results()


class LedgerTree(BasePrefixCache):
    """Prefix-tree stand-in that keeps only the numbers the adder reads."""

    disable = False

    def __init__(self, allocator: PagedAllocator, evictable_tokens: int):
        self.token_to_kv_pool_allocator = allocator
        self.req_to_token_pool = None
        self.page_size = allocator.page_size
        self.evictable = evictable_tokens
        self.root = _Node("root", 0, False)
        self.load_back_calls: dict[str, int] = {}
        self.next_match = None

    # -- sizes the budget reads
    def evictable_size(self) -> int:
        return self.evictable

    def full_evictable_size(self) -> int:
        return self.evictable

    # -- locking: a device prefix leaves the evictable pool while locked. As in the
    # radix tree, a lock holds the node and every ancestor (a loaded span's lock keeps
    # the device prefix under it locked).
    def inc_lock_ref(self, node: _Node):
        while node is not None:
            if node.lock_ref == 0 and node.evictable:
                self.evictable -= node.tokens
            node.lock_ref += 1
            node = node.parent
        return _IncLockRefResult()

    def dec_lock_ref(self, node: _Node, params: Any = None):
        while node is not None:
            node.lock_ref -= 1
            assert node.lock_ref >= 0, node.name
            if node.lock_ref == 0 and node.evictable:
                self.evictable += node.tokens
            node = node.parent
        return _DecLockRefResult()

    # -- host load-back: allocates now, so the baseline drops at once. 0.5.9 calls it
    # as (last_host_node, host_hit_length), later releases with InitLoadBackParams;
    # before 0.5.22 it returns the loaded indices, from 0.5.22 the loaded length.
    def init_load_back(self, params, host_hit_length=None):
        if host_hit_length is None:  # 0.5.10-0.5.11 name the node last_host_node
            node = getattr(params, "best_match_node", None) or params.last_host_node
            host, rid = params.host_hit_length, params.req.rid
        else:
            node, host = params, host_hit_length
            rid = node.name
        loaded, new_node = self._load_back(rid, node, host)
        return (loaded if MODERN else loaded_indices(loaded)), new_node

    def _load_back(self, rid: str, node: _Node, host: int) -> tuple[int, _Node]:
        dev = node.tokens  # the matched node's span is the request's device prefix
        pages = _ceil_div(dev + host, self.page_size) - _ceil_div(dev, self.page_size)
        alloc = self.token_to_kv_pool_allocator
        short = pages - alloc.free_pages
        if short > 0:
            evict_pages = min(short, self.evictable // self.page_size)
            self.evictable -= evict_pages * self.page_size
            alloc.free_pages += evict_pages
        if not alloc.alloc_pages(pages):
            self.load_back_calls[rid] = 0
            return 0, node
        # The loaded span is a new cache node under the device prefix, evictable until
        # the request's lock takes it. Before 0.5.20 the adder can still refuse the
        # request after its load-back (chunk or input budget), and the span then stays
        # in the tree as cache: the baseline (free + evictable) is what it was. The node
        # holds the slots it took (whole pages), so refusing gives them all back.
        self.load_back_calls[rid] = host
        span = pages * self.page_size
        self.evictable += span
        return host, _Node(f"{rid}/loaded", span, True, parent=node)

    # -- before 0.5.22 a waiting request is matched by Req.init_next_round_input, which
    # asks the tree: the answer is the round spec's device prefix and host hit.
    def match_prefix(self, params):
        if self.next_match is None:
            _never_called("match_prefix")
        out, self.next_match = self.next_match, None
        return out

    def load_back_is_cache_owned(self) -> bool:
        return True

    # -- abstract members of SGLang's base class that the adder never calls: reaching one
    # means the harness drives SGLang further than it models, so fail loudly.
    def reset(self):
        _never_called("reset")

    def checkpoint(self, req, *, up_to, **kwargs):
        _never_called("checkpoint")

    def evict(self, params):
        _never_called("evict")

    def cache_finished_req(self, *args, **kwargs):
        _never_called("cache_finished_req")

    def cache_unfinished_req(self, *args, **kwargs):
        _never_called("cache_unfinished_req")


def _never_called(name: str):
    raise RuntimeError(f"the reference tree's {name}() was called: the harness does not model it")


# --------------------------------------------------------------------------- round


def _make_req(rid: str, seq_len: int, max_new_tokens: int) -> Req:
    req = Req(
        rid=rid,
        origin_input_text="",
        origin_input_ids=make_input_ids(seq_len),
        sampling_params=SamplingParams(max_new_tokens=max_new_tokens),
    )
    if MODERN:
        req.refresh_fill_ids()
    return req


def _resumed_req(ch: dict, max_new: int, tree: LedgerTree) -> Req:
    """The chunked request carried from the previous round: its KV [0, start) is held
    in its req_to_token row (allocated, not in the tree's evictable part, so already
    outside the baseline)."""
    req = _make_req(ch["rid"], ch["seq_len"], max_new)
    req.last_node = tree.root
    if MODERN:
        req.prefix_len = ch["start"]
        req.kv.req_pool_idx = 0
    else:
        req.prefix_indices = loaded_indices(ch["start"])
        req.req_pool_idx = 0
        req.init_next_round_input()  # as the scheduler does before add_chunked_req
    return req


def _waiting_req(q: dict, max_new: int, tree: LedgerTree) -> Req:
    """A waiting request as ``match_prefix`` leaves it: the device hit, its node, the
    host hit."""
    req = _make_req(q["rid"], q["seq_len"], max_new)
    dev = q["device_prefix"]
    node = _Node(q["rid"], dev, bool(q.get("prefix_evictable", True)) and dev > 0)
    if MODERN:
        req.prefix_len = dev
        req.last_node = node
        req.best_match_node = node
        req.host_hit_length = q["host_hit"]
        req.num_matched_prefix_tokens = dev + q["host_hit"]
    else:
        tree.next_match = match_result(dev, node, q["host_hit"])
        req.init_next_round_input(tree)
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


def _record(adder: PrefillAdder, call: str, req: Req, result, piece, load_back: int) -> dict:
    """One adder call; ``piece`` is the (decision, start, end) it gave."""
    total_offset, cur_offset = offsets(adder)
    decision, start, end = piece
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
        "rem_total_offset": total_offset,
        "cur_offset": cur_offset,
        "load_back": int(load_back),
    }


def _new_adder(round_spec: dict, tree: LedgerTree) -> PrefillAdder:
    return PrefillAdder(
        page_size=round_spec["page_size"],
        tree_cache=tree,
        token_to_kv_pool_allocator=tree.token_to_kv_pool_allocator,
        running_batch=None,  # prefill node: no decode batch, no reservation
        new_token_ratio=0.0,
        rem_input_tokens=round_spec["max_prefill_tokens"],
        rem_chunk_tokens=round_spec["chunked_prefill_size"],
    )


def _stops_before_candidate(adder: PrefillAdder, skip_rule: str, resumed: bool) -> bool:
    state = adder.budget_state()
    if skip_rule == "not_continue":
        return resumed and state != AddReqResult.CONTINUE
    return LOOP_BREAKS_ON_OTHER and state == AddReqResult.OTHER


def run_sglang_round(round_spec: dict) -> list[dict]:
    """Run one prefill round through this release's PrefillAdder; one record per adder
    call (see the module docstring)."""
    validate_round_spec(round_spec)
    publish_config(round_spec.get("schedule_policy", "fcfs"))
    skip_rule = round_spec.get("skip_rule", "sglang")
    if skip_rule not in ("sglang", "not_continue"):
        raise ValueError(f"unknown skip_rule {skip_rule!r}")
    max_new = round_spec["max_new_tokens"]
    tree = LedgerTree(PagedAllocator(round_spec["page_size"], round_spec["free"]),
                      round_spec["evictable"])  # fmt: skip
    adder = _new_adder(round_spec, tree)
    records: list[dict] = []

    chunked_req = None
    ch = round_spec.get("chunked")
    if ch is not None:
        req = _resumed_req(ch, max_new, tree)
        chunked_req = adder.add_chunked_req(req)
        admitted = req in adder.can_run_list
        got = ("resumed", *piece(req)) if admitted else ("rejected", None, None)
        records.append(_record(adder, "add_chunked_req", req, None, got, 0))

    for i, q in enumerate(round_spec["queue"]):
        if _stops_before_candidate(adder, skip_rule, ch is not None and i == 0):
            break
        req = _waiting_req(q, max_new, tree)
        res = adder.add_one_req(
            req,
            has_chunked_req=chunked_req is not None,
            truncation_align_size=round_spec.get("truncation_align_size"),
        )
        admitted = bool(adder.can_run_list) and adder.can_run_list[-1] is req
        if admitted:
            start, end = piece(req)
            got = ("truncated" if end < q["seq_len"] else "full", start, end)
        else:
            got = ("rejected", None, None)
        loaded = tree.load_back_calls.get(req.rid, 0) if admitted else 0
        records.append(_record(adder, "add_one_req", req, res, got, loaded))
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
