"""Eviction frees whole cache entries, oldest first, as SGLang's radix cache frees whole
leaves: a prefix is either still on the device or gone, never part of it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kvforensics.model.pool import PagePool
from kvforensics.model.sizing import pages_for


def test_a_small_need_evicts_the_whole_oldest_entry():
    pool = PagePool(page_size=16, size=1024, free=64, evictable={"old": 320, "new": 160})
    pool.alloc("r", 0, 100)  # 112 slots: 48 short of free, the whole of "old" goes
    assert pool.cached("old") == 0
    assert pool.cached("new") == 160
    assert pool.free == 64 + 320 - 112
    assert pool.baseline() == 64 + 320 + 160 - 112
    assert [(op.op, op.key, op.tokens) for op in pool.ops if op.op == "evict"] == [("evict", "old", 320)]


@given(
    page=st.sampled_from([1, 16, 48]),
    free_pages=st.integers(0, 20),
    entries=st.lists(st.integers(1, 12), min_size=1, max_size=6),
    asks=st.lists(st.integers(1, 600), min_size=1, max_size=8),
)
def test_entries_stay_whole_and_the_baseline_only_falls_by_what_is_allocated(page, free_pages, entries, asks):
    cache = {f"e{i}": n * page for i, n in enumerate(entries)}
    size = free_pages * page + sum(cache.values()) + 4096 * page
    pool = PagePool(page_size=page, size=size, free=free_pages * page, evictable=cache)
    done = 0
    for n in asks:
        need = pages_for(done, done + n, page)
        if not pool.can_allocate(need):
            break
        before = pool.baseline()
        pool.alloc("r", done, done + n)
        done += n
        assert pool.baseline() == before - need
        # an entry still cached is cached whole; the evicted ones are the oldest
        left = [k for k in cache if pool.cached(k)]
        assert all(pool.cached(k) == cache[k] for k in left)
        assert left == list(cache)[len(cache) - len(left):]
        assert pool.free >= 0 and pool.free % page == 0
        pool.check()


def test_an_observed_eviction_cuts_the_entry_tail_in_whole_pages_and_keeps_the_baseline():
    pool = PagePool(page_size=16, size=1024, free=64, evictable={"a": 320, "b": 160})
    # the pages that hold the 100 tokens kept (112 slots), the rest freed
    assert pool.evict_entry("a", keep=100) == 208
    assert pool.cached("a") == 112 and pool.free == 64 + 208
    assert pool.baseline() == 64 + 320 + 160  # evictable became free: the baseline holds
    assert pool.evict_entry("b") == 160 and pool.cached("b") == 0
    assert pool.evict_entry("b") == 0  # gone already
    pool.check()
    assert [(op.op, op.key, op.tokens) for op in pool.ops] == [("evict", "a", 208), ("evict", "b", 160)]


def test_an_observed_eviction_leaves_a_locked_entry_alone():
    pool = PagePool(page_size=16, size=1024, free=64, evictable={"a": 320})
    pool.lock(("a",))
    assert pool.evict_entry("a") == 0 and pool.cached("a") == 320
