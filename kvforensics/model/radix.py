"""SGLang's radix prefix tree (``mem_cache/radix_cache.py``, ``RadixCache``) with counts
in place of slot tensors, and the page pool that uses it for its cache.

The tree's rules, as SGLang 0.5.23 has them (docs/sglang-0.5.23-rules.md, "Radix tree"):

* keys are whole pages (``RadixKey.page_aligned``): a request's partial last page never
  enters the tree; a match is cut to whole pages too;
* a match that ends inside a node splits it (``_split_node``); so does an insert;
* ``inc_lock_ref`` / ``dec_lock_ref`` walk the whole path to the root: a locked node is
  protected, every other one evictable;
* ``evict`` takes whole unlocked leaves, least recently used first, until it has freed
  at least what was asked; a parent left childless and unlocked joins the candidates;
* recency is ``time.monotonic()`` read once per match or insert (every node on the walked
  path gets that value) and once per new node (a split's upper half, a new leaf). A
  counter read at the same places gives the same order.
"""

from __future__ import annotations

import heapq
import itertools

from mypy_extensions import mypyc_attr

from kvforensics.model.pool import PagePool, PrefillOutOfMemory
from kvforensics.model.sizing import pages_for


@mypyc_attr(allow_interpreted_subclasses=True)  # copy and pickle make one without __init__
class Node:
    __slots__ = ("children", "id", "key", "last_access", "lock_ref", "parent")

    def __init__(self, key: tuple[int, ...], parent: Node | None, now: int, node_id: int):
        self.key = key  # page ids
        self.parent = parent
        self.children: dict[int, Node] = {}
        self.lock_ref = 0
        self.last_access = now
        self.id = node_id


@mypyc_attr(allow_interpreted_subclasses=True)  # copy and pickle make one without __init__
class RadixTree:
    """Page ids in, token counts out (``page_size`` tokens per id)."""

    def __init__(self, page_size: int):
        self.page_size = page_size
        self._ids = itertools.count()
        self._clock = itertools.count()
        self.root = Node((), None, next(self._clock), next(self._ids))
        self.root.lock_ref = 1  # the root is never evicted
        self.evictable = 0  # tokens in unlocked nodes
        self.protected = 0  # tokens in locked nodes
        self._leaves: set[Node] = set()

    def _node(self, key: tuple[int, ...], parent: Node) -> Node:
        return Node(key, parent, next(self._clock), next(self._ids))

    def _split(self, child: Node, n: int) -> Node:
        """``child`` keeps its last ``len - n`` pages; a new node above it takes the first ``n``."""
        parent = child.parent
        assert parent is not None, "the root is never split"
        upper = self._node(child.key[:n], parent)
        upper.lock_ref = child.lock_ref
        parent.children[child.key[0]] = upper
        child.key = child.key[n:]
        upper.children = {child.key[0]: child}
        child.parent = upper
        return upper

    def match(self, key: tuple[int, ...]) -> tuple[int, Node]:
        """Tokens of ``key``'s longest cached prefix and its last node (``match_prefix``)."""
        if not key:
            return 0, self.root
        now = next(self._clock)
        node, i = self.root, 0
        node.last_access = now
        while i < len(key) and key[i] in node.children:
            child = node.children[key[i]]
            child.last_access = now
            n = _common(child.key, key, i)
            if n < len(child.key):
                node = self._split(child, n)
                i += n
                break
            node, i = child, i + n
        return i * self.page_size, node

    def insert(self, key: tuple[int, ...]) -> int:
        """Add ``key``; returns the tokens of it that were cached already (``insert``)."""
        now = next(self._clock)
        node, i = self.root, 0
        node.last_access = now
        while i < len(key) and key[i] in node.children:
            node = node.children[key[i]]
            node.last_access = now
            n = _common(node.key, key, i)
            i += n
            if n < len(node.key):
                node = self._split(node, n)
        if i < len(key):
            leaf = self._node(key[i:], node)
            node.children[key[i]] = leaf
            self.evictable += len(leaf.key) * self.page_size
            self._update_leaf(node)
            self._update_leaf(leaf)
        return i * self.page_size

    def inc_lock(self, node: Node) -> int:
        """Lock ``node``'s path; returns how many tokens stopped being evictable."""
        moved = 0
        while node is not self.root:
            if node.lock_ref == 0:
                moved += len(node.key) * self.page_size
            node.lock_ref += 1
            self._update_leaf(node)
            parent = node.parent
            assert parent is not None, "a path below the root ends at the root"
            node = parent
        self.evictable -= moved
        self.protected += moved
        return moved

    def dec_lock(self, node: Node) -> int:
        """Unlock ``node``'s path; returns how many tokens became evictable."""
        moved = 0
        while node is not self.root:
            if node.lock_ref == 1:
                moved += len(node.key) * self.page_size
            node.lock_ref -= 1
            self._update_leaf(node)
            parent = node.parent
            assert parent is not None, "a path below the root ends at the root"
            node = parent
        self.evictable += moved
        self.protected -= moved
        return moved

    def evict(self, tokens: int) -> list[Node]:
        """Whole unlocked leaves, least recently used first, until ``tokens`` are freed."""
        heap = [(x.last_access, x.id, x) for x in self._leaves]
        heapq.heapify(heap)
        out: list[Node] = []
        freed = 0
        while freed < tokens and heap:
            _, _, x = heapq.heappop(heap)
            freed += len(x.key) * self.page_size
            out.append(x)
            parent = x.parent
            assert parent is not None, "the root is never a leaf to evict"
            del parent.children[x.key[0]]
            self.evictable -= len(x.key) * self.page_size
            self._leaves.discard(x)
            self._update_leaf(parent)
            if not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, parent.id, parent))
        return out

    def _update_leaf(self, node: Node) -> None:
        if node.lock_ref > 0 or node.children:
            self._leaves.discard(node)
        else:
            self._leaves.add(node)


def _common(node_key: tuple[int, ...], key: tuple[int, ...], at: int) -> int:
    n = min(len(node_key), len(key) - at)
    i = 0
    while i < n and node_key[i] == key[at + i]:
        i += 1
    return i


@mypyc_attr(allow_interpreted_subclasses=True)
class RadixPagePool(PagePool):
    """A page pool whose cache is a radix tree, as SGLang's ``RadixCache`` with its paged
    allocator: requests lock tree nodes (``prefix_keys`` name them), a computed piece
    enters the tree at its checkpoint, eviction takes whole leaves, and a batch's
    allocation first evicts for ``extend + requests * page`` tokens on pages over 1
    (``alloc_paged_token_slots_extend``' conservative estimate) or ``extend`` on page 1.
    """

    __slots__ = ("_nodes", "tree")

    def __init__(self, *, page_size: int, size: int, free: int, evictable: int = 0,
                 record: bool = True, cache_kind: str = "radix"):  # fmt: skip
        # ``unevictable`` only to have the sizes checked: the cache is the tree's.
        super().__init__(page_size=page_size, size=size, free=free, cache_kind=cache_kind,
                         record=record, unevictable=evictable)  # fmt: skip
        self._stuck = 0
        self.tree = RadixTree(page_size)
        self._nodes: dict[str, Node] = {}
        if evictable // page_size:
            # A starting cache of unknown content: one path of pages no request has.
            self.tree.insert(tuple(range(-(evictable // page_size), 0)))
            self._sync()

    def handle(self, node: Node) -> tuple[str, ...]:
        """The ``prefix_keys`` that lock ``node`` (none for the root)."""
        if node is self.tree.root:
            return ()
        key = f"node{node.id}"
        self._nodes[key] = node
        return (key,)

    def _sync(self) -> None:
        self._evict_total = self.tree.evictable

    def cached(self, key: str) -> int:
        node = self._nodes.get(key)
        return 0 if node is None else len(node.key) * self.page_size

    def lock(self, keys: tuple[str, ...]) -> int:
        dropped = 0
        for key in keys:
            n = self.tree.inc_lock(self._nodes[key])
            dropped += n
            self._op("lock", key=key, tokens=n)
        self._sync()
        return dropped

    def unlock(self, keys: tuple[str, ...]) -> None:
        for key in keys:
            self._op("unlock", key=key, tokens=self.tree.dec_lock(self._nodes[key]))
        self._sync()

    def _evict(self, need: int) -> None:
        for node in self.tree.evict(need):
            tokens = len(node.key) * self.page_size
            self.free += tokens
            key = f"node{node.id}"
            self._nodes.pop(key, None)
            self._op("evict", key=key, tokens=tokens)
        self._sync()

    def alloc_batch(self, pieces: list[tuple[str, int, int]]) -> int:
        p = self.page_size
        extend = sum(e - s for _, s, e in pieces)
        demand = extend + (len(pieces) * p if p > 1 else 0)
        if demand > self.free:
            self._evict(demand - self.free)
        need = sum(pages_for(s, e, p) for _, s, e in pieces)
        if need > self.free:
            self._op("oom", tokens=extend)
            raise PrefillOutOfMemory(extend, self.free, self.evictable_size(), self.cache_kind)
        for owner, s, e in pieces:
            self.alloc(owner, s, e)
        return need

    def checkpoint(self, owner: str, key: tuple[int, ...], protected: int,
                   locked: tuple[str, ...]) -> tuple[str, ...]:  # fmt: skip
        """``owner``'s computed pages ``key`` enter the tree (``RadixCache.checkpoint``):
        what the tree had already is a duplicate and freed, the rest moves from the
        owner's slots to the tree; the lock moves to the new last node. Returns the new
        ``prefix_keys``."""
        cached = self.tree.insert(key)
        end = len(key) * self.page_size
        dup = max(0, cached - protected)
        if dup:
            self.free += dup
            self._op("free", owner=owner, tokens=dup)
        if end > protected:
            self.held[owner] = self.held.get(owner, 0) - (end - protected)
            self._op("release", owner=owner, key=f"{owner}@{end}", tokens=end - protected - dup)
        _, node = self.tree.match(key)
        self.unlock(locked)
        keys = self.handle(node)
        self.lock(keys)
        return keys

    def touch(self, key: tuple[int, ...]) -> None:
        """A release re-inserts and re-matches the request's pages: its path is the most
        recently used (``release_kv_cache`` with ``checkpoint=True``)."""
        self.tree.insert(key)
        self.tree.match(key)
        self._sync()

    def release(self, owner: str, entries: tuple[tuple[str, int], ...]) -> None:
        """Transfer done: what the owner still holds (a partial last page) goes back."""
        held = self.held.pop(owner, 0)
        if held:
            self.free += held
            self._op("free", owner=owner, tokens=held)

    def check(self) -> None:
        held = sum(self.held.values())
        total = self.free + self.tree.evictable + self.tree.protected + held
        assert total <= self.size, f"pool over-committed: {total} > {self.size}"
        assert self.free >= 0 and self.tree.evictable >= 0 and self.tree.protected >= 0
