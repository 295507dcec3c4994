"""A hybrid SWA pool: the allocation needs room in the full pool and in the smaller SWA
pool; the adder's baseline stays the full pool's."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvforensics.model.pool import PagePool, PrefillOutOfMemory
from kvforensics.model.sizing import pages_for


@given(
    page=st.sampled_from([1, 16, 64]),
    pages=st.integers(8, 200),
    swa_part=st.floats(0.2, 1.0),
    free_part=st.floats(0.0, 1.0),
    cached_part=st.floats(0.0, 1.0),
    asks=st.lists(st.integers(1, 4000), min_size=1, max_size=12),
)
def test_an_allocation_needs_room_in_both_pools(page, pages, swa_part, free_part, cached_part, asks):
    size = pages * page
    swa = max(page, min(size - page, int(size * swa_part)))  # smaller than the full pool
    short = size - swa
    free = short + int((size - short) * free_part)
    cached = int((size - free) * cached_part)
    pool = PagePool(page_size=page, size=size, free=free, evictable={"c": cached}, swa_size=swa)
    done = 0
    for n in asks:
        base, held = pool.baseline(), pool.held.get("r", 0)
        fits = pool.can_allocate(pages_for(done, done + n, page))
        try:
            pool.alloc("r", done, done + n)
        except PrefillOutOfMemory as exc:
            assert not fits
            full, swa_line = str(exc).splitlines()[2:4]
            assert full.startswith(f"Available full tokens: {exc.available} ")
            swa_free = max(0, exc.available_size - short)
            assert swa_line.startswith(f"Available swa tokens: {swa_free + exc.evictable_size} ")
            return
        assert fits
        done += n
        # the SWA pool is never over-committed; the adder sees the full pool's baseline
        assert pool.free - short >= 0
        assert pool.baseline() == base - (pool.held["r"] - held)
        pool.check()


def test_the_full_pool_would_fit_where_the_swa_pool_does_not():
    pool = PagePool(page_size=64, size=4096, free=2048, swa_size=3072)
    pool.alloc("a", 0, 1024)  # room in both: 1024 of 2048 full, 1024 of 1024 SWA
    assert pool.baseline() == 1024
    with pytest.raises(PrefillOutOfMemory) as got:
        pool.alloc("b", 0, 64)
    assert got.value.available == 1024
    assert "Available swa tokens: 0 (swa_available_size=0 + swa_evictable_size=0)" in str(got.value)
