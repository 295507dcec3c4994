"""Page granularity cannot end an out-of-memory by itself on a pool of whole pages.

A memory check that passed leaves room for the pages of every piece it admitted, under
every profile: the baseline (free pages + cache of whole pages) and every charge are whole
pages, so ``extend < rem_total`` puts ``ceil_page(extend)`` within what is left, a
truncated piece is shorter than the extend it was checked on, and a piece from a prefix
that ends mid-page needs fewer pages than its ceiling. Only an allocator that asks for
more than the pages (the SWA allocator of 0.5.9 and 0.5.10: a page per request) or memory
gone after the check gets there (docs/causes.md, "Page granularity").
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings, target
from hypothesis import strategies as st

from kvforensics.causes import Mechanism, PoolReading, classify
from kvforensics.model import (
    Config,
    OutOfMemory,
    PagePool,
    PrefillNode,
    Request,
    Timing,
    get_policy,
)
from kvforensics.model.profiles import PROFILES

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def nodes(draw):
    """(config, free, cache entries, requests, full-size SWA pool or not): free and cache
    whole pages, device prefixes whole pages (a radix match is), host hits anything."""
    page = draw(st.sampled_from([16, 32, 64, 128]))
    chunk = page * draw(st.integers(2, 40)) + draw(st.sampled_from([0, 0, page // 2, 3]))
    align = draw(st.sampled_from([0, 2 * page, 4 * page]))
    cfg = Config(page_size=page, chunked_prefill_size=chunk,
                 max_prefill_tokens=chunk * draw(st.integers(1, 3)), pool_size=1 << 18,
                 align_size=align, max_new_tokens=draw(st.sampled_from([1, 2, 100])))  # fmt: skip
    free = page * draw(st.integers(1, 600))
    cache, reqs = {}, []
    for i in range(draw(st.integers(1, 6))):
        seq = draw(st.integers(2, 40000))
        dp = page * draw(st.integers(0, (seq - 1) // page)) if draw(st.booleans()) else 0
        hh = draw(st.integers(0, seq - dp - 1)) if draw(st.booleans()) else 0
        keys = ()
        if dp:
            cache[f"c{i}"], keys = dp, (f"c{i}",)
        reqs.append(Request(f"r{i}", seq, device_prefix=dp, host_hit=hh, prefix_keys=keys))
    old = page * draw(st.integers(0, 300))
    if old:
        cache["old"] = old
    return cfg, free, cache, reqs, draw(st.booleans())


@SETTINGS
@given(nodes(), st.sampled_from(sorted(PROFILES)), st.sampled_from(["prefix", "fixed", "upstream"]))
def test_a_passing_check_leaves_room_for_the_pages(node, profile, policy):
    cfg, free, cache, reqs, swa = node
    prof = PROFILES[profile]
    if swa and prof.swa_page_per_request:
        swa = False  # that allocator asks a page per request beyond the pages
    if swa:
        cfg = cfg.with_(swa_pool_size=cfg.pool_size)
    pool = PagePool(page_size=cfg.page_size, size=cfg.pool_size, free=free, evictable=cache,
                    swa_size=cfg.swa_pool_size)  # fmt: skip
    run = PrefillNode(cfg, get_policy(policy), pool, waiting=reqs, profile=prof,
                      timing=Timing(round_overhead_s=1.0, transfer_latency_s=1e9)).run(200)  # fmt: skip
    # how close each batch came to the baseline its last check saw: the search aims low
    used: dict[int, list[int]] = {}
    for s in run.ledger.rows:
        if s.call == "allocate" and s.allocated is not None:
            used.setdefault(s.round, [s.baseline, 0])[1] += s.allocated
    if used:
        target(-float(min(b - n for b, n in used.values())), label="tightest batch")
    oom = run.oom
    if oom is not None:
        got = classify(oom.tokens, [PoolReading("full", free=oom.available_size,
                                                evictable=oom.evictable_size)])  # fmt: skip
        assert got.mechanism is not Mechanism.PAGE_GRANULARITY, oom.message


def test_the_swa_allocator_of_0_5_9_refuses_what_fits_in_whole_pages():
    """The negative control: the same kind of node, the allocator that asks a page per
    request, and a batch that fits in whole pages."""
    cfg = Config(page_size=64, chunked_prefill_size=4096, max_prefill_tokens=16384,
                 pool_size=65536, align_size=0, swa_pool_size=65536)  # fmt: skip
    for name, fails in (("sglang-0.5.9", True), ("sglang-0.5.11", False)):
        pool = PagePool(page_size=64, size=65536, free=1024, swa_size=65536)
        run = PrefillNode(cfg, get_policy("upstream"), pool, waiting=[Request("r", 1000)],
                          profile=PROFILES[name]).run(10)  # fmt: skip
        assert isinstance(run.oom, OutOfMemory) is fails, name
        if fails:  # 1000 tokens, 1024 in whole pages, 1024 free: 1000 + 64 asked
            assert (run.oom.tokens, run.oom.available) == (1000, 1024)
