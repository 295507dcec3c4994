"""The executor's allocator on its own: LRU eviction, locks, releases, the OOM text."""

from __future__ import annotations

import pytest

from kvforensics.exec.allocator import KvOutOfMemory, PageAllocator
from kvforensics.exec.content import seed_of
from kvforensics.exec.plan import PoolSnapshot


def make(free=256, evictable=(("old", 128), ("new", 128)), held=()):
    size = free + sum(t for _, t in evictable) + sum(t for _, t in held)
    return PageAllocator(
        PoolSnapshot(size=size, page_size=64, free=free, evictable=evictable, held=held), seed_of
    )


def test_evicts_oldest_first_from_the_tail():
    a = make()
    a.alloc("r", 0, 320)  # 5 pages: 4 free + 1 evicted from "old"
    assert [len(v) for v in a.evictable.values()] == [1, 2]
    assert list(a.evictable) == ["old", "new"]
    assert a.evictable["old"][0].pos0 == 0  # the head of the entry survives
    assert a.check_structure() == []


def test_locked_entries_are_not_evicted_and_count_as_unavailable():
    a = make()
    a.lock("old")
    a.alloc("r", 0, 384)  # 4 free + 2 from "new"
    assert "new" not in a.evictable and len(a.locked["old"]) == 2
    with pytest.raises(KvOutOfMemory) as exc:
        a.alloc("s", 0, 1)
    assert str(exc.value).endswith(
        "Try to allocate 1 tokens.\nAvailable full tokens: 0 "
        "(full_available_size=0 + full_evictable_size_=0)"
    )
    a.unlock("old")
    assert list(a.evictable) == ["old"]


def test_release_makes_cache_and_frees_the_rest():
    a = make(evictable=())
    a.alloc("r", 0, 200)  # 4 pages
    a.release("r", [("kv:r", 128)])
    assert len(a.evictable["kv:r"]) == 2 and len(a.free) == 2
    assert a.check_structure() == []


def test_pieces_continue_a_partial_page():
    a = make(evictable=())
    first = a.alloc("r", 0, 100)
    second = a.alloc("r", 100, 130)  # token 100..127 in page 1, then one new page
    assert sum(n for _, n, _, _ in first) == 100
    assert [(n, pos) for _, n, pos, _ in second] == [(28, 100), (2, 128)]
    with pytest.raises(Exception, match="does not continue"):
        a.alloc("r", 300, 310)


def test_initially_held_pages_anchor_on_the_next_piece():
    a = make(free=128, evictable=(), held=(("chunked", 128),))
    # token 1000 is in token page 15: it holds pages 14 and 15 and gets page 16
    runs = a.alloc("chunked", 1000, 1064)
    assert a.held["chunked"].first == 14
    assert [(n, pos) for _, n, pos, _ in runs] == [(24, 1000), (40, 1024)]
    held_page = a.held["chunked"].pages[1]
    # its first 40 rows keep what was there; the next 24 are the new piece's
    assert (held_page.lo, held_page.hi, held_page.tail.lo, held_page.tail.hi) == (0, 40, 40, 64)


def test_radix_message():
    err = KvOutOfMemory(10, 3, 4, "radix")
    assert str(err).splitlines()[-1] == "Available tokens: 7 (available_size=3 + evictable_size=4)"
