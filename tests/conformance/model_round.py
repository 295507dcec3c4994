"""The model's side of the differential comparison: one prefill round of a ``round_spec``
(the format of ``sglang_ref.run_sglang_round``) through kvforensics' ``PrefillNode.step()``
with the release's profile (default ``sglang-0.5.23``) and policy ``upstream``, as records
of the same shape.

How the spec becomes a node:

* the pool holds ``free`` free tokens (the profile floors them to whole pages, as the
  reference's page-count allocator does) and ``evictable`` tokens of cache: one entry per
  queued request whose device prefix is evictable (locking it takes it out of the
  baseline, like the reference tree's nodes), the rest in one entry ``"other"``, which is
  evicted first;
* the chunked request carried from an earlier round has computed ``start`` tokens; its
  KV is held, outside the baseline;
* the queue is the node's waiting list, in order.

Every record is read just after the adder call, with the pool's live baseline, as the
reference reads ``adder.rem_total_tokens`` after each call.

The reference tree is one evictable count, so it cannot say what happens when a host
load-back evicts a *later* queued request's device prefix (in SGLang that request's
next ``match_prefix`` finds a shorter prefix; the model moves the evicted part to the
host hit). ``ModelRound.out_of_domain`` flags such rounds; the comparison skips them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kvforensics.model.config import Config
from kvforensics.model.ledger import NAMES, Ledger
from kvforensics.model.node import PrefillNode
from kvforensics.model.policies import get_policy
from kvforensics.model.pool import PagePool
from kvforensics.model.profiles import get_profile
from kvforensics.model.request import Request

PROFILE = "sglang-0.5.23"
POLICY = "upstream"
OTHER_CACHE = "other"


def prefix_key(rid: str) -> str:
    return f"pfx:{rid}"


class RecordingLedger(Ledger):
    """A ledger that also keeps each adder call as a reference-shaped record."""

    __slots__ = ("pool", "records")

    def __init__(self, pool: PagePool) -> None:
        super().__init__()
        self.pool = pool
        self.records: list[dict] = []

    def step(self, *args, **kwargs) -> None:
        super().step(*args, **kwargs)
        row = dict(zip(NAMES, self.rows[-1], strict=True))  # the row just written
        call, t1, c1 = row["call"], row["total_offset_after"], row["cur_offset_after"]
        chunk1, decision, state = row["rem_chunk_after"], row["decision"], row["budget_state"]
        start, end, load_back = row["start"], row["end"], row["load_back"]
        live = self.pool.baseline()
        self.records.append(
            {
                "call": call,
                "rid": row["rid"],
                "result": None if call == "add_chunked_req" else str(state),
                "decision": decision,
                "start": start,
                "end": end,
                "rem_total_tokens": live - t1,
                "cur_rem_tokens": live - c1,
                "rem_chunk_tokens": chunk1,
                "rem_total_offset": t1,
                "cur_offset": c1,
                "load_back": load_back,
            }
        )


@dataclass(slots=True)
class ModelRound:
    records: list[dict]
    #: a load-back evicted a later queued request's device prefix (see module docstring)
    out_of_domain: bool
    seconds: float


def build_node(spec: dict, profile: str = PROFILE) -> PrefillNode:
    page = spec["page_size"]
    queue = spec["queue"]
    ch = spec.get("chunked")
    evict_prefixes = {
        prefix_key(q["rid"]): q["device_prefix"]
        for q in queue
        if q.get("prefix_evictable", True) and q["device_prefix"] > 0
    }
    other = spec["evictable"] - sum(evict_prefixes.values())
    evictable = {OTHER_CACHE: other, **evict_prefixes}
    size = spec["free"] + spec["evictable"] + sum(q["seq_len"] for q in queue) + page
    if ch is not None:
        size += ch["seq_len"]
    cfg = Config(
        page_size=page,
        chunked_prefill_size=spec["chunked_prefill_size"],
        max_prefill_tokens=spec["max_prefill_tokens"],
        pool_size=size,
        truncation_align_size=spec.get("truncation_align_size") or 0,
        max_new_tokens=spec["max_new_tokens"],
        cache_kind="radix",
    )
    pool = PagePool(page_size=page, size=size, free=spec["free"], evictable=evictable)
    waiting = [
        Request(
            q["rid"],
            q["seq_len"],
            device_prefix=q["device_prefix"],
            host_hit=q["host_hit"],
            prefix_keys=(prefix_key(q["rid"]),) if prefix_key(q["rid"]) in evict_prefixes else (),
        )
        for q in queue
    ]
    chunked = None
    if ch is not None:
        chunked = Request(ch["rid"], ch["seq_len"], done=ch["start"], admitted_round=-1)
        pool.held[ch["rid"]] = cfg.ceil_page(ch["start"])
    return PrefillNode(
        cfg,
        get_policy(POLICY),
        pool,
        waiting=waiting,
        chunked=chunked,
        profile=get_profile(profile),
    )


def model_round(spec: dict, profile: str = PROFILE) -> ModelRound:
    t0 = time.perf_counter()
    node = build_node(spec, profile)
    ledger = RecordingLedger(node.pool)
    node.ledger = ledger
    node.step()
    dt = time.perf_counter() - t0
    examined = {r["rid"] for r in ledger.records}
    ood = False
    for op in node.pool.ops:
        if op.op in ("alloc", "oom"):
            break  # the adder is done: allocation may evict anything
        if op.op == "evict" and op.key.startswith("pfx:") and op.key[4:] in examined:
            ood = True
            break
    return ModelRound(ledger.records, ood, dt)


def run_model_round(round_spec: dict, profile: str = PROFILE) -> list[dict]:
    """Records of one round through the model, in ``run_sglang_round``'s shape."""
    return model_round(round_spec, profile).records
