"""Multi-round reference: SGLang 0.5.23's real prefill path drives a PD prefill node over
many rounds. Runs only in ``.venv-sglang`` (``scripts/conformance_env.sh``); the project
side talks to it through ``reference_client.SglangReference(script=...)``, one JSON run
spec per line in, one JSON reply per line out (``--serve``).

What is SGLang's own code, unchanged:

* ``PagedTokenToKVPoolAllocator`` (``TokenToKVPoolAllocator`` for page 1) with no KV pool
  object, ``ReqToTokenPool``, ``RadixCache`` (matching, LRU eviction, locks);
* ``Req``, ``Scheduler._get_new_batch_prefill_raw`` (the queue loop, the real
  ``PrefillAdder`` and ``SchedulePolicy``), ``ScheduleBatch.init_new`` and
  ``prepare_for_extend`` (allocation, and the real "Prefill out of memory" error);
* ``checkpoint_kv_cache`` after every forward and ``release_kv_cache(req, tree,
  checkpoint=True)`` when a finished request's transfer ends (what 0.5.23's prefill
  node does: ``disaggregation/prefill.py``, ``process_batch_result_disagg_prefill`` and
  the transfer poll).

Stand-ins, and why:

* ``_Sched``: the scheduler object ``_get_new_batch_prefill_raw`` runs on. It holds the
  attributes that method reads, with a prefill node's values (no LoRA, no HiCache, no
  priority preemption, no delayers, no mixed chunking, no grammar queue); building a
  real ``Scheduler`` needs a model, a tokenizer and sockets.
* the forward pass: none. A batch is taken as computed once allocated: each request's
  first output token is a constant; a finished request waits ``transfer_rounds`` rounds
  (its KV transfer) before its KV is released into the tree.
* outside allocations: ``outside`` takes slots from the allocator between rounds (another
  user of the pool, as in the cause catalogue) so that memory changes between admission
  and allocation; they are freed ``outside_rounds`` later.

Copied steps of the scheduler loop (each a line or two, written here because the real
loop needs the whole event machinery): arrivals join ``waiting_queue``; finished
requests enter the transfer list; ``chunked_req`` is kept between rounds exactly as
``_get_new_batch_prefill_raw`` leaves it.

A run spec::

    {"page_size": 16, "pool_size": 4096, "chunked_prefill_size": 512,
     "max_prefill_tokens": 2048, "max_new_tokens": 1, "transfer_rounds": 2,
     "block_size": 64, "rounds": 40,
     "requests": [{"rid": "r0", "arrive": 0, "seq_len": 300, "blocks": [0, 1, 2, 3, 4]}],
     "outside": [{"round": 5, "tokens": 600, "rounds": 3}]}

Token ids come from the blocks (block ``h`` is ``block_size`` ids unique to ``h``), so
requests that share leading blocks share a prefix in the radix tree.

Each round gives one record: the adder calls (as in ``sglang_ref.py``), the batch's pieces,
free and evictable after allocation, the tokens evicted, the ``Prefill batch`` numbers
(``#new-token``, ``#cached-token``), or the out-of-memory with its message.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import torch  # noqa: E402
from _release import PrefillAdder, Req, SamplingParams  # noqa: E402

torch.set_num_threads(1)  # torch.searchsorted costs ~12 ms a call with many threads

from sglang.srt.runtime_context import get_context  # noqa: E402

_OVERRIDE = get_context().override_server_args(
    attention_backend="torch_native", disaggregation_mode="prefill"
)
_OVERRIDE.install()

import sglang.srt.managers.scheduler as _scheduler_module  # noqa: E402
import sglang_ref  # noqa: E402  (the single-round driver's record shape)
from sglang.srt.disaggregation.utils import DisaggregationMode  # noqa: E402
from sglang.srt.managers.schedule_batch import ScheduleBatch  # noqa: E402
from sglang.srt.managers.schedule_policy import SchedulePolicy  # noqa: E402
from sglang.srt.managers.scheduler import Scheduler  # noqa: E402
from sglang.srt.managers.scheduler_components import metrics_reporter  # noqa: E402
from sglang.srt.managers.scheduler_components.metrics_reporter import (  # noqa: E402
    SchedulerMetricsReporter,
)

reporter_logger = metrics_reporter.logger
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache  # noqa: E402
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixCache  # noqa: E402


class _RecordingAdder(PrefillAdder):
    """The real adder; every add_chunked_req / add_one_req call is also kept as a
    record in ``sglang_ref``'s shape (read from the adder after the call)."""

    records: list[dict]

    def add_chunked_req(self, req):
        out = super().add_chunked_req(req)
        got = ("resumed", req.prefix_len, req.extend_end)
        self.records.append(sglang_ref._record(self, "add_chunked_req", req, None, got, 0))
        return out

    def add_one_req(self, req, has_chunked_req, truncation_align_size):
        seq = len(req.origin_input_ids)
        res = super().add_one_req(req, has_chunked_req, truncation_align_size)
        if self.can_run_list and self.can_run_list[-1] is req:
            kind = "truncated" if req.extend_end < seq else "full"
            got, loaded = (kind, req.prefix_len, req.extend_end), req.host_loaded_length
        else:
            got, loaded = ("rejected", None, None), 0
        self.records.append(sglang_ref._record(self, "add_one_req", req, res, got, loaded))
        return res


def _stand_in_scheduler(spec: dict, pool, alloc, tree) -> types.SimpleNamespace:
    """What ``_get_new_batch_prefill_raw`` reads off the scheduler, for a PD prefill node
    with every optional feature off."""
    s = types.SimpleNamespace(
        page_size=spec["page_size"], tree_cache=tree, token_to_kv_pool_allocator=alloc,
        req_to_token_pool=pool, waiting_queue=[], chunked_req=None,
        max_prefill_tokens=spec["max_prefill_tokens"],
        chunked_prefill_size=spec["chunked_prefill_size"],
        truncation_align_size=spec.get("truncation_align_size"),
        enable_priority_preemption=False, enable_priority_scheduling=False, is_hybrid_swa=False,
        is_mixed_chunk=False, enable_lora=False, lora_drainer=None, enable_hicache_storage=False,
        enable_lmcache=False, enable_hierarchical_cache=False,
        enable_unified_cache_external_linker=False, enable_overlap=False, dllm_config=None,
        dynamic_chunk_sizer=None, min_free_slots_delayer=None, prefill_delayer=None,
        hisparse_coordinator=None, priority_scheduling_preemption_threshold=0,
        max_prefill_bs=0, max_running_requests=pool.size, processed_tokens_counter=None,
        grammar_manager=types.SimpleNamespace(has_waiting_grammars=lambda: False),
        new_token_ratio_tracker=types.SimpleNamespace(current=0.0),
        tp_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(
            attn_backend=None, prefill_aware_swa=False)),
        load_inquirer=types.SimpleNamespace(_get_num_pending_tokens=lambda **kw: 0),
        model_config=types.SimpleNamespace(vocab_size=1 << 20, is_encoder_decoder=False,
                                           is_multimodal=False, hf_config=None),
        spec_algorithm=_NoSpec(),
        policy=SchedulePolicy("fcfs", tree, False, False, False),
    )  # fmt: skip
    adder_records: list[dict] = []

    def adder_class():
        return type("Adder", (_RecordingAdder,), {"records": adder_records})

    s.adder_records = adder_records
    s.get_prefill_adder_class = adder_class
    # Request slots: the free rows plus those the batch's requests already hold.
    s.get_num_allocatable_reqs = lambda running_bs, *a, num_held_rows=0, **k: (
        pool.available_size() + num_held_rows
    )
    s._add_request_to_queue = s.waiting_queue.append
    s._get_new_batch_prefill_raw = types.MethodType(Scheduler._get_new_batch_prefill_raw, s)
    return s


class _NoSpec:
    def is_none(self):
        return True

    def __getattr__(self, name):
        if name.startswith("is_"):
            return lambda: False
        raise AttributeError(name)


def _tokens(blocks: list[int], seq_len: int, block: int) -> list[int]:
    ids = [1 + h * block + j for h in blocks for j in range(block)]
    return ids[:seq_len]


class _Node:
    """One prefill node: the real pools and tree, the stand-in scheduler."""

    def __init__(self, spec: dict):
        page, size = spec["page_size"], spec["pool_size"]
        if page == 1:
            alloc = TokenToKVPoolAllocator(size, torch.int64, "cpu", None, False)
        else:
            alloc = PagedTokenToKVPoolAllocator(size, page, torch.int64, "cpu", None, False)
        longest = max((r["seq_len"] for r in spec["requests"]), default=1) + 8
        pool = ReqToTokenPool(len(spec["requests"]) + 4, longest, "cpu", False)
        tree = RadixCache(CacheInitParams(disable=False, req_to_token_pool=pool,
                                          token_to_kv_pool_allocator=alloc, page_size=page))  # fmt: skip
        self.spec, self.alloc, self.tree = spec, alloc, tree
        self.sched = _stand_in_scheduler(spec, pool, alloc, tree)
        self.running = ScheduleBatch(reqs=[], batch_is_full=False)
        self.transfers: list[tuple[int, Req]] = []  # (round it ends, request)
        self.outside: list[tuple[int, object]] = []  # (round it is freed, slots)
        self.evicted = 0
        evict = tree.evict

        def counting_evict(params):
            out = evict(params)
            self.evicted += out.num_tokens_evicted
            return out

        tree.evict = counting_evict

    def _between_rounds(self, now: int) -> None:
        """Transfers that end release their KV into the tree; outside slots come and go;
        arrivals join the queue (the event loop's steps, copied)."""
        for end, req in [t for t in self.transfers if t[0] <= now]:
            release_kv_cache(req, self.tree, checkpoint=True)
            self.transfers.remove((end, req))
        for end, slots in [o for o in self.outside if o[0] <= now]:
            self.alloc.free(slots)
            self.outside.remove((end, slots))
        self.during = []
        for o in self.spec.get("outside", ()):
            if o["round"] != now:
                continue
            if o.get("during"):
                self.during.append(o)
            else:
                self._take_outside(o, now)
        block, max_new = self.spec["block_size"], self.spec["max_new_tokens"]
        for r in self.spec["requests"]:
            if r["arrive"] == now:
                ids = _tokens(r["blocks"], r["seq_len"], block)
                req = Req(rid=r["rid"], origin_input_text="", origin_input_ids=sglang_ref
                          .make_input_ids(0) + type(sglang_ref.make_input_ids(0))("q", ids),
                          sampling_params=SamplingParams(max_new_tokens=max_new))  # fmt: skip
                self.sched.waiting_queue.append(req)

    def _take_outside(self, o: dict, now: int) -> None:
        # Free slots only (allocator.alloc does not evict), or nothing.
        slots = self.alloc.alloc(o["tokens"])
        if slots is not None:
            self.outside.append((now + o.get("rounds", 1), slots))

    def take_during(self, now: int) -> None:
        """Outside allocations that land after the adder's decisions, before the batch
        allocates (``_Batch.prepare_for_extend``)."""
        for o in self.during:
            self._take_outside(o, now)
        self.during = []

    def round(self, now: int) -> dict:
        self._between_rounds(now)
        s = self.sched
        s.adder_records.clear()
        self.evicted = 0
        t0 = time.perf_counter()
        _Batch.node, _Batch.now = self, now
        try:
            batch, self.running = s._get_new_batch_prefill_raw(None, self.running)
        except RuntimeError as exc:
            if "out of memory" not in str(exc).lower():
                raise
            return self._record(now, None, t0, oom=str(exc))
        if self.during:  # no batch: the outside user still takes them
            self.take_during(now)
        rec = self._record(now, batch, t0)  # free and evictable right after allocation
        if batch is not None:
            self._after_forward(now, batch)
            rec["prefill_batch"] = self._report(now, batch)
        return rec

    def _report(self, now: int, batch) -> str:
        """The real ``Prefill batch`` line: ``SchedulerMetricsReporter.report_prefill_stats``
        on the batch's own ``PrefillStats``, the reporter's state a stand-in (a stats
        logging rank, no metrics collector) and token usage from the real pools."""
        alloc, tree, size = self.alloc, self.tree, self.spec["pool_size"]
        used = size - alloc.available_size() - tree.evictable_size()
        usage = types.SimpleNamespace(get_prefill_usage_msg_parts=lambda: [
            f"token usage: {used / size:.2f}"])  # fmt: skip
        sched = types.SimpleNamespace(
            pool_stats_observer=types.SimpleNamespace(get_pool_stats=lambda: usage),
            forward_ct=now, waiting_queue=self.sched.waiting_queue,
            disaggregation_mode=DisaggregationMode.PREFILL,
            disagg_prefill_bootstrap_queue=types.SimpleNamespace(queue=[]),
            disagg_prefill_inflight_queue=[r for _, r in self.transfers],
            kv_events_publisher=types.SimpleNamespace(  # KV events off
                emit_kv_metrics=lambda: None, publish_kv_events=lambda: None),
        )  # fmt: skip
        reporter = types.SimpleNamespace(
            is_stats_logging_rank=True, current_scheduler_metrics_enabled=False,
            last_prefill_stats_tic=time.perf_counter(), last_input_throughput=0.0,
            stats=types.SimpleNamespace(), scheduler=sched, _graph_backend_label="cuda graph",
            enable_mfu_metrics=False,
        )  # fmt: skip
        lines, level = _Lines(), reporter_logger.level
        reporter_logger.addHandler(lines)
        reporter_logger.setLevel(logging.INFO)  # what a server's log level lets through
        try:
            SchedulerMetricsReporter.report_prefill_stats(reporter, batch, batch.prefill_stats, False)
        finally:
            reporter_logger.removeHandler(lines)
            reporter_logger.setLevel(level)
        return lines.lines[-1] if lines.lines else ""

    def _after_forward(self, now: int, batch) -> None:
        """Every computed piece is checkpointed into the tree; a finished request goes to
        KV transfer (``process_batch_result_disagg_prefill``)."""
        for req in batch.reqs:
            if req is self.sched.chunked_req:
                checkpoint_kv_cache(req, self.tree)
                continue
            req.output_ids.append(1)
            checkpoint_kv_cache(req, self.tree)
            self.transfers.append((now + self.spec["transfer_rounds"], req))

    def _record(self, now: int, batch, t0: float, oom: str | None = None) -> dict:
        calls = list(self.sched.adder_records)
        pieces = [(c["rid"], c["start"], c["end"]) for c in calls if c["start"] is not None]
        if batch is None and not oom:
            pieces = []
        return {
            "round": now,
            "calls": calls,
            "pieces": pieces,
            "free": int(self.alloc.available_size()),
            "evictable": int(self.tree.evictable_size()),
            "evicted": self.evicted,
            "new_token": sum(e - s for _, s, e in pieces),
            "oom": oom,
            "seconds": time.perf_counter() - t0,
        }


class _Batch(ScheduleBatch):
    """The real batch; ``prepare_for_extend`` first lets the round's ``during`` outside
    allocations land (the only change: a hook point, as the cause catalogue's outside
    user takes memory between admission and allocation)."""

    node: _Node | None = None
    now = 0

    def prepare_for_extend(self):
        if self.node is not None:
            self.node.take_during(self.now)
        return super().prepare_for_extend()


_scheduler_module.ScheduleBatch = _Batch  # what _get_new_batch_prefill_raw builds


def run_multi(spec: dict) -> list[dict]:
    """Rounds of one run, until ``rounds`` or an out-of-memory."""
    node = _Node(spec)
    out = []
    for now in range(spec["rounds"]):
        rec = node.round(now)
        out.append(rec)
        if rec["oom"]:
            break
    return out


class _Lines(logging.Handler):
    """What SGLang's loggers print during a run, kept as the lines it wrote."""

    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _serve_one(line: str, out) -> None:
    lines = _Lines()
    root = logging.getLogger()
    root.addHandler(lines)
    printed = io.StringIO()
    try:
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(printed):  # the reply pipe is ours alone
            rounds = run_multi(json.loads(line))
        reply = {"records": rounds, "seconds": time.perf_counter() - t0}
    except Exception as exc:
        reply = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        root.removeHandler(lines)
    reply["printed"] = printed.getvalue().splitlines() + lines.lines
    out.write(json.dumps(reply) + "\n")
    out.flush()


def main(argv: list[str]) -> int:
    if "--serve" in argv:
        out = sys.stdout
        for line in sys.stdin:
            if line.strip():
                _serve_one(line, out)
        return 0
    print(json.dumps(run_multi(json.load(sys.stdin)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
