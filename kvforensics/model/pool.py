"""The KV page pool of one prefill node: free pages, evictable cache, and what requests hold.

Everything is counted in tokens (slots); allocations are whole pages.

NOTE: the baseline the adder reads, ``available_size() + evictable_size()``, is live: an
allocation, a load-back or a lock changes it at once. Eviction never changes it (it only
moves slots from the evictable part to the free part).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mypy_extensions import mypyc_attr

from kvforensics.model.sizing import batch_ask, pages_for


def oom_message(
    tokens: int,
    available: int,
    evictable: int,
    cache_kind: str,
    swa: tuple[int, int] | None = None,
) -> str:
    """The text of SGLang's ``Prefill out of memory`` error (``alloc_for_extend``);
    ``swa``: the SWA pool's (available, evictable), printed on a line of its own."""
    total = available + evictable
    if cache_kind == "hybrid":
        line = (
            f"Available full tokens: {total} "
            f"(full_available_size={available} + full_evictable_size_={evictable})"
        )
    else:
        line = (
            f"Available tokens: {total} (available_size={available} + evictable_size={evictable})"
        )
    if swa is not None:
        a, e = swa
        line += f"\nAvailable swa tokens: {a + e} (swa_available_size={a} + swa_evictable_size={e})"
    return (
        "Prefill out of memory. Try to lower your batch size.\n"
        f"Try to allocate {tokens} tokens.\n{line}"
    )


# a Python class when compiled: mypyc's classes cannot derive from RuntimeError
@mypyc_attr(native_class=False)
class PrefillOutOfMemory(RuntimeError):
    """SGLang's ``Prefill out of memory`` error, with the same message text."""

    def __init__(
        self,
        tokens: int,
        available: int,
        evictable: int,
        cache_kind: str,
        swa: tuple[int, int] | None = None,
    ):
        self.tokens = tokens
        self.available_size = available
        self.evictable_size = evictable
        self.available = available + evictable
        super().__init__(oom_message(tokens, available, evictable, cache_kind, swa))


@mypyc_attr(native_class=False)  # frozen: mypyc's copy and pickle would set its fields
@dataclass(frozen=True, slots=True)
class PoolOp:
    """One thing done to the pool, in order. ``kvforensics exec`` replays these on tensors.

    op: ``lock``/``unlock`` (a cache entry), ``load_back`` and ``alloc`` (slots for
    tokens [start, end) of ``owner``), ``release`` (owner's slots become cache entry
    ``key`` of ``tokens``), ``free`` (owner's slots go straight back), ``evict``
    (``tokens`` of entry ``key`` dropped to make room).
    """

    round: int
    op: str
    owner: str = ""
    key: str = ""
    start: int = 0
    end: int = 0
    tokens: int = 0


@mypyc_attr(allow_interpreted_subclasses=True)  # tests refuse load-backs in a subclass
class PagePool:
    """Free slots + evictable cache entries (kept in eviction order) + locked entries.

    A hybrid SWA pool (``swa_size``, SGLang's ``SWATokenToKVPoolAllocator``) keeps a
    second, smaller pool for the sliding-window layers. Modelled for pieces inside the
    window: the SWA pool holds the same tokens and cache as the full pool, so its free
    count is the full pool's less ``size - swa_size``. The adder's baseline is the full
    pool's (``PrefillAdder.rem_total_tokens`` under ``is_hybrid_swa``); an allocation needs
    room in both.

    NOTE: ``_evictable`` is ordered oldest first, like vLLM's free block queue: eviction
    takes from the front, and a released entry goes to the back. A partially evicted entry
    shrinks from its tail (a radix tree evicts leaves first), so a request whose prefix
    was partly evicted still finds the head of it.
    """

    __slots__ = (
        "_evict_total",
        "_evictable",
        "_locked",
        "_stuck",
        "cache_kind",
        "free",
        "held",
        "ops",
        "page_per_request",
        "page_size",
        "paged",
        "record",
        "round",
        "size",
        "swa",
        "swa_short",
    )

    def __init__(
        self,
        *,
        page_size: int,
        size: int,
        free: int,
        evictable: Mapping[str, int] | Iterable[tuple[str, int]] | None = None,
        cache_kind: str = "hybrid",
        record: bool = True,
        unevictable: int = 0,
        swa_size: int | None = None,
    ):
        # (C-level checks and one pass over the entries: short runs build a pool a round;
        # a replay's re-runs mostly start with no cache entry, which skips the passes)
        entries: OrderedDict[str, int] = OrderedDict(evictable or ())
        # Real pools hold whole pages; hand-written examples (the postmortem's "12000
        # free") need not, and the arithmetic does not depend on it.
        if free < 0 or (entries and min(entries.values()) < 0):
            raise ValueError("free and evictable sizes must be >= 0")
        if unevictable < 0:
            raise ValueError("unevictable must be >= 0")
        if swa_size is not None and not 0 < swa_size <= size:
            raise ValueError(f"swa_size {swa_size} must be in (0, {size}]")
        total = sum(entries.values()) if entries else 0
        if free + total + unevictable > size:
            raise ValueError(
                f"free {free} + evictable {total + unevictable} exceed the pool ({size})"
            )
        if entries and 0 in entries.values():  # an empty entry is no cache
            entries = OrderedDict((k, n) for k, n in entries.items() if n)
        self.page_size = page_size
        #: a real pool's counts are whole pages (a hand-written example's need not be);
        #: once whole, every operation keeps them so (``check``)
        self.paged = free % page_size == 0 and (
            not entries or all(n % page_size == 0 for n in entries.values())
        )
        self.size = size
        self.free = free
        self._evictable = entries
        self._evict_total = total
        #: cache the tree counts as evictable but eviction cannot free when the allocation
        #: comes (locked by requests in flight): in the baseline, never in free
        self._stuck = unevictable
        self._locked: dict[str, list[int]] = {}  # key -> [tokens, refs]
        self.held: dict[str, int] = {}
        self.cache_kind = cache_kind
        self.record = record
        self.ops: list[PoolOp] = []
        self.round = 0
        #: a hybrid SWA pool (its line is in the out-of-memory message, even at full size)
        self.swa = swa_size is not None
        #: how many free slots fewer the SWA pool has than the full pool (0: no SWA pool)
        self.swa_short = size - swa_size if swa_size is not None else 0
        #: the SWA allocator asks a page per request beyond the tokens (``batch_ask``)
        self.page_per_request = False

    # -- what the adder reads -------------------------------------------------
    def available_size(self) -> int:
        return self.free

    def evictable_size(self) -> int:
        return self._evict_total + self._stuck

    def baseline(self) -> int:
        return self.free + self._evict_total + self._stuck

    def cached(self, key: str) -> int:
        """Tokens of cache entry ``key`` still on the device (evictable or locked)."""
        if key in self._locked:
            return self._locked[key][0]
        return self._evictable.get(key, 0)

    def evictable_entries(self) -> tuple[tuple[str, int], ...]:
        """Evictable cache entries, oldest (first to go) first."""
        return tuple(self._evictable.items())

    def used(self) -> int:
        """Slots not free and not evictable: held by requests or locked cache."""
        return self.size - self.baseline()

    def _op(
        self,
        op: str,
        *,
        owner: str = "",
        key: str = "",
        start: int = 0,
        end: int = 0,
        tokens: int = 0,
    ) -> None:
        if self.record:
            self.ops.append(PoolOp(self.round, op, owner, key, start, end, tokens))

    # -- locking --------------------------------------------------------------
    def lock(self, keys: tuple[str, ...]) -> int:
        """Protect cache entries from eviction. Returns how far the baseline dropped."""
        dropped = 0
        for key in keys:
            entry = self._locked.get(key)
            if entry is not None:
                entry[1] += 1
                continue
            n = self._evictable.pop(key, None)
            if n is None:
                continue  # not cached (evicted, or held by someone else): nothing to protect
            self._evict_total -= n
            dropped += n
            self._locked[key] = [n, 1]
            if self.record:  # tested here: the adder locks on its hot path
                self.ops.append(PoolOp(self.round, "lock", key=key, tokens=n))
        return dropped

    def unlock(self, keys: tuple[str, ...]) -> None:
        for key in keys:
            entry = self._locked.get(key)
            if entry is None:
                continue
            entry[1] -= 1
            if entry[1] == 0:
                del self._locked[key]
                self._evictable[key] = entry[0]  # most recently used: evicted last
                self._evict_total += entry[0]
                if self.record:
                    self.ops.append(PoolOp(self.round, "unlock", key=key, tokens=entry[0]))

    # -- allocation -----------------------------------------------------------
    def _evict(self, need: int) -> None:
        """Evict whole entries, oldest first, until at least ``need`` slots are free: the
        radix cache frees a leaf's whole value, never part of one (SGLang's
        ``RadixCache.evict``), so a waiting request whose prefix was evicted finds none of
        it on the device."""
        ev = self._evictable
        while need > 0 and ev:
            key, n = ev.popitem(last=False)
            self._evict_total -= n
            self.free += n
            need -= n
            self._op("evict", key=key, tokens=n)

    def evict_entry(self, key: str, keep: int = 0) -> int:
        """Cut evictable entry ``key`` to its first ``keep`` tokens (whole pages), the rest
        freed: an eviction the logs show (a later check finds less of a prefix on the
        device) where the model had no reason to evict. A locked or absent entry is left
        as it is. Returns the slots freed (the baseline does not move)."""
        n = self._evictable.get(key)
        if n is None or n <= keep:
            return 0
        freed = n - keep
        if self.paged:  # NOTE: free stays whole pages (``check``)
            freed = freed // self.page_size * self.page_size
        if not freed:
            return 0
        if freed < n:
            self._evictable[key] = n - freed
        else:
            del self._evictable[key]
        self._evict_total -= freed
        self.free += freed
        self._op("evict", key=key, tokens=freed)
        return freed

    def can_allocate(self, tokens: int) -> bool:
        return tokens + self.swa_short <= self.free + self._evict_total

    def alloc(self, owner: str, start: int, end: int, *, op: str = "alloc") -> int:
        """Allocate the slots for tokens [start, end) of ``owner`` (page-exact)."""
        n = pages_for(start, end, self.page_size)
        # the full pool's free slots this needs: the SWA pool, short by ``swa_short``, too
        room = n + self.swa_short
        if room > self.free:
            if room > self.free + self._evict_total:
                self.raise_oom(end - start)
            self._evict(room - self.free)
        self.free -= n
        self.held[owner] = self.held.get(owner, 0) + n
        if self.record:
            self.ops.append(PoolOp(self.round, op, owner=owner, start=start, end=end, tokens=n))
        return n

    def alloc_batch(self, pieces: list[tuple[str, int, int]]) -> int:
        """Allocate a whole batch as ``alloc_for_extend`` does: all or out-of-memory."""
        p = self.page_size
        need = sum(pages_for(s, e, p) for _, s, e in pieces)
        if self.page_per_request:
            # evicted for, then refused on, the estimate, even where the pages would fit
            room = batch_ask(pieces, p, True) + self.swa_short
            if room > self.free + self._evict_total:
                self.raise_oom(sum(e - s for _, s, e in pieces))
            if room > self.free:
                self._evict(room - self.free)
        if need + self.swa_short > self.free + self._evict_total:
            self.raise_oom(sum(e - s for _, s, e in pieces))
        for owner, s, e in pieces:
            self.alloc(owner, s, e)
        return need

    def raise_oom(self, tokens: int) -> None:
        # SGLang evicts what it can before giving up, so the message shows it as free.
        self._evict(self._evict_total)
        # NOTE: an allocator of whole pages cannot report a part of one as available
        assert not self.paged or self.free % self.page_size == 0, (
            f"{self.free} free, not whole pages"
        )
        self._op("oom", tokens=tokens)
        evictable = self._evict_total + self._stuck
        swa = (max(0, self.free - self.swa_short), evictable) if self.swa else None
        raise PrefillOutOfMemory(tokens, self.free, evictable, self.cache_kind, swa)

    def hold(self, owner: str, tokens: int) -> None:
        """Slots ``owner`` already holds when the model starts mid-flight (a chunked
        request's computed part, KV still in transfer): outside free and evictable.

        NOTE: not checked against the pool size. A state rebuilt from logs estimates what
        is held (``check`` says whether it adds up); a caller with exact figures checks
        them itself, as a scenario does."""
        if tokens < 0:
            raise ValueError(f"{owner}: held slots must be >= 0, got {tokens}")
        self.held[owner] = self.held.get(owner, 0) + tokens

    # -- after the forward ----------------------------------------------------
    def release(self, owner: str, entries: tuple[tuple[str, int], ...]) -> None:
        """KV transfer done: the owner's slots become evictable cache entries."""
        held = self.held.pop(owner, 0)
        given = 0
        for key, n in entries:
            n = min(n, held - given)
            if n <= 0:
                break
            if key in self._evictable or key in self._locked:
                continue  # computed twice: the copy already cached wins, ours is freed below
            self._evictable[key] = n
            self._evictable.move_to_end(key)
            self._evict_total += n
            given += n
            self._op("release", owner=owner, key=key, tokens=n)
        if held > given:  # slots not covered by an entry go straight back to free
            self.free += held - given
            self._op("free", owner=owner, tokens=held - given)

    def free_held(self, owner: str, tokens: int) -> int:
        """Free up to ``tokens`` of what ``owner`` holds (part of a KV transfer that the logs
        show has come back). Returns the slots freed."""
        held = self.held.get(owner, 0)
        n = min(held, tokens)
        if n <= 0:
            return 0
        self.held[owner] = held - n
        self.free += n
        self._op("free", owner=owner, tokens=n)
        return n

    def check(self) -> None:
        """Invariant: every slot is free, evictable, locked or held, exactly once."""
        locked = sum(n for n, _ in self._locked.values())
        total = self.free + self._evict_total + self._stuck + locked + sum(self.held.values())
        assert self._evict_total == sum(self._evictable.values()), "evictable total drifted"
        assert total <= self.size, f"pool over-committed: {total} > {self.size}"
        assert not self.paged or self.free % self.page_size == 0, (
            f"{self.free} free, not whole pages"
        )
        assert self.free >= 0 and self._evict_total >= 0
