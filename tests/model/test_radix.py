"""The model's radix tree and its pool (``model/radix.py``), without SGLang: splits, LRU
order of whole-leaf eviction, locks along the path, and the pool's books balancing over
random runs. The multi-round differential holds the same code to SGLang's RadixCache."""

from __future__ import annotations

import tomllib
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from kvforensics.model.radix import RadixPagePool, RadixTree
from kvforensics.scenario.loader import parse_scenario


def test_match_splits_a_node_and_insert_counts_what_was_cached():
    t = RadixTree(page_size=16)
    assert t.insert((1, 2, 3, 4)) == 0
    assert t.evictable == 64
    n, node = t.match((1, 2, 9))
    assert n == 32 and node.key == (1, 2) and node.children[3].key == (3, 4)
    assert t.insert((1, 2, 5)) == 32 and t.evictable == 80


def test_lock_protects_the_whole_path_and_eviction_takes_lru_leaves():
    t = RadixTree(page_size=1)
    t.insert((1, 2, 3))
    t.insert((1, 2, 4, 5))  # (1,2) split off; leaves (3) and (4,5)
    _, leaf = t.match((1, 2, 3))  # (3) is now the most recent
    assert t.inc_lock(leaf) == 3 and (t.evictable, t.protected) == (2, 3)
    # only (4,5) is an unlocked leaf; its parent (1,2) is locked
    assert [n.key for n in t.evict(1)] == [(4, 5)] and t.evictable == 0
    assert t.dec_lock(leaf) == 3
    # the leaf (3) goes, then its parent once childless and unlocked
    assert [n.key for n in t.evict(10)] == [(3,), (1, 2)]
    assert t.evictable == t.protected == 0


def test_evict_stops_once_enough_is_freed():
    t = RadixTree(page_size=1)
    t.insert((1, 1, 1))
    t.insert((2, 2))
    assert [n.key for n in t.evict(1)] == [(1, 1, 1)]  # older first, and whole
    assert t.evictable == 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.lists(st.integers(0, 5), max_size=6)),
                max_size=30))  # fmt: skip
def test_pool_books_balance(ops):
    # Requests of random page ids are admitted (matched and locked), allocated,
    # checkpointed, released: every slot is free, evictable, protected or held, always.
    page, size = 4, 4 * 40
    pool = RadixPagePool(page_size=page, size=size, free=size)
    live: list[tuple[str, tuple[int, ...], tuple[str, ...], int]] = []
    for i, (kind, ids) in enumerate(ops):
        if kind < 2 and ids:
            key = tuple(ids)
            cached, node = pool.tree.match(key)
            keys = pool.handle(node)
            pool.lock(keys)
            end = len(key) * page + 1  # a partial last page
            try:
                pool.alloc_batch([(f"r{i}", cached, end)])
            except RuntimeError:
                pool.unlock(keys)
                continue
            live.append((f"r{i}", key, pool.checkpoint(f"r{i}", key, cached, keys), end))
        elif live:
            rid, key, keys, _ = live.pop(0)
            pool.release(rid, ())
            pool.unlock(keys)
            pool.touch(key)
        held = sum(pool.held.values())
        assert pool.free + pool.tree.evictable + pool.tree.protected + held == size
        assert pool.baseline() == pool.free + pool.tree.evictable


def _trace_scenario(**config):
    path = Path(__file__).resolve().parents[2] / "fixtures/scenarios/mooncake-conversation.toml"
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    data["config"].update(config)
    data["trace"].update(limit=150)
    return data, path.parent


def test_a_radix_trace_without_a_host_tier_runs_on_the_radix_tree():
    data, base = _trace_scenario(cache_kind="radix", pool_size=65536)
    data["trace"]["host_capacity"] = 0
    data["pool"] = {"free": 61440, "evictable": 4096}
    node = parse_scenario(data, base=base).build_node("upstream")
    assert isinstance(node.pool, RadixPagePool)
    assert node.pool.evictable_size() == 4096  # the starting cache: one leaf no request has
    res = node.run()
    # the trace's conversations share leading blocks: later turns start on the device
    assert any(r.pieces and r.pieces[0][1] > 0 for r in res.requests.values())
    node.pool.check()
    held = sum(node.pool.held.values())
    assert node.pool.free + node.pool.tree.evictable + node.pool.tree.protected + held == 65536


def test_a_host_tier_or_a_hybrid_pool_keeps_the_block_entries():
    data, base = _trace_scenario()
    assert not isinstance(parse_scenario(data, base=base).build_node("upstream").pool,
                          RadixPagePool)  # fmt: skip
