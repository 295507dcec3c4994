"""A page allocator over the KV tensor, written on its own (it shares no code with the
model's ``PagePool``), so that an out-of-memory it raises is a second opinion.

It keeps page ids, not tokens: a free-page list, evictable cache entries in LRU order
(oldest first; an entry loses pages from its tail, as a radix tree drops leaves first),
locked entries, and each request's pages in token order. Every page also carries what it
should contain (whose tokens, from which position, which rows), so the integrity check
can re-derive every live row without trusting the allocator's bookkeeping of slots.
Pure Python; no torch.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kvforensics.errors import InputError
from kvforensics.exec.plan import PoolSnapshot
from kvforensics.model.pool import oom_message


class KvOutOfMemory(RuntimeError):
    """SGLang's ``alloc_for_extend`` failure, message text included."""

    def __init__(self, tokens: int, available: int, evictable: int, cache_kind: str):
        self.tokens, self.available_size, self.evictable_size = tokens, available, evictable
        self.available = available + evictable
        # Same text as the model's: both say what SGLang prints. The decision to raise is
        # this allocator's own.
        super().__init__(oom_message(tokens, available, evictable, cache_kind))


@dataclass(slots=True)
class Page:
    """One page and what it should hold: rows [lo, hi) are tokens ``pos0 + row`` of the
    content ``seed`` (a request's, or a pre-existing cache entry's)."""

    id: int
    seed: int
    pos0: int
    lo: int = 0
    hi: int = 0
    #: rows written after a split: a page a request held before the plan started has
    #: placeholder content in its first rows and the request's next tokens after them
    tail: Page | None = None

    def records(self) -> list[Page]:
        return [self] if self.tail is None else [self, self.tail]


@dataclass(slots=True)
class Holder:
    """A request's pages. ``first`` is the token-page index of ``pages[0]``: unknown
    (None) for pages it held before the plan starts until its next piece anchors them."""

    pages: list[Page] = field(default_factory=list)
    first: int | None = None


#: a run of rows to write or check: (slot_start, rows, token position of the first row, seed)
Run = tuple[int, int, int, int]


def pages_for(page: int, start: int, end: int) -> int:
    """New pages for tokens [start, end): a partial last page already held is reused."""
    return -(-end // page) - -(-start // page)


class PageAllocator:
    def __init__(self, snap: PoolSnapshot, seed_of: Callable[[str], int]) -> None:
        p = self.page = snap.page_size
        self.cache_kind = snap.cache_kind
        self.num_pages = snap.size // p
        # Slots past the last whole page count as available (as in a hand-written pool of
        # 12000 tokens) but can never be handed out: a page is the unit of allocation.
        self.stray = snap.size - self.num_pages * p
        self.seed_of = seed_of
        self.free: deque[int] = deque()
        self.evictable: OrderedDict[str, list[Page]] = OrderedDict()
        self.locked: dict[str, list[Page]] = {}
        self.held: dict[str, Holder] = {}
        self.notes: list[str] = []
        self.evicted_pages = 0
        self.reused_pages = 0
        self._ever_used: set[int] = set()

        next_id = 0

        def carve(name: str, tokens: int) -> list[Page]:
            nonlocal next_id
            n = -(-tokens // p)
            if next_id + n > self.num_pages:
                raise InputError(f"pool snapshot does not fit in {self.num_pages} pages of {p}")
            seed = seed_of(f"init:{name}")
            out = []
            for i in range(n):
                rows = min(p, tokens - i * p)
                out.append(Page(next_id + i, seed, i * p, 0, rows))
                self._ever_used.add(next_id + i)
            next_id += n
            return out

        for rid, tokens in snap.held:
            self.held[rid] = Holder(carve(rid, tokens))
        for key, tokens in snap.evictable:
            if tokens:
                self.evictable[key] = carve(key, tokens)
        self.free.extend(range(next_id, self.num_pages))
        if self.available_tokens() != snap.free:
            self.notes.append(
                f"snapshot free {snap.free} laid out as {self.available_tokens()} (whole pages)"
            )

    # -- sizes ----------------------------------------------------------------
    def available_tokens(self) -> int:
        return len(self.free) * self.page + self.stray

    def evictable_pages(self) -> int:
        return sum(len(v) for v in self.evictable.values())

    def initial_content(self) -> list[Run]:
        """Rows that exist before the first step (to be written once, at setup)."""
        return self.runs(include_free=False)

    # -- locks ----------------------------------------------------------------
    def lock(self, key: str) -> None:
        pages = self.evictable.pop(key, None)
        if pages is None:
            self.notes.append(f"lock {key}: not in the cache here")
            return
        self.locked[key] = pages

    def unlock(self, key: str) -> None:
        pages = self.locked.pop(key, None)
        if pages is None:
            self.notes.append(f"unlock {key}: not locked here")
            return
        self.evictable[key] = pages  # most recently used: evicted last
        self.evictable.move_to_end(key)

    # -- allocation -----------------------------------------------------------
    def _evict(self, n: int) -> None:
        while n > 0 and self.evictable:
            key, pages = next(iter(self.evictable.items()))
            take = min(n, len(pages))
            for pg in pages[len(pages) - take :]:
                self.free.append(pg.id)
            del pages[len(pages) - take :]
            if not pages:
                del self.evictable[key]
            self.evicted_pages += take
            n -= take

    def _take(self, n: int) -> list[int]:
        """n free page ids, evicting the oldest cache first when free pages are short."""
        if n > len(self.free):
            self._evict(n - len(self.free))
        ids = [self.free.popleft() for _ in range(n)]
        for i in ids:
            if i in self._ever_used:
                self.reused_pages += 1
            self._ever_used.add(i)
        return ids

    def out_of_memory(self, tokens: int) -> KvOutOfMemory:
        # SGLang evicts all it can before giving up, so the message shows it as free.
        self._evict(self.evictable_pages())
        return KvOutOfMemory(tokens, self.available_tokens(), 0, self.cache_kind)

    def fits(self, pages: int) -> bool:
        return pages <= len(self.free) + self.evictable_pages()

    def alloc(self, owner: str, start: int, end: int) -> list[Run]:
        """Pages for tokens [start, end) of ``owner``; returns the runs of rows to write."""
        p = self.page
        n = pages_for(p, start, end)
        if not self.fits(n):
            raise self.out_of_memory(end - start)
        h = self.held.setdefault(owner, Holder())
        first_new = -(-start // p)
        if h.first is None:  # anchor: the pages it already holds end right here
            h.first = first_new - len(h.pages)
            if h.first < 0:
                raise InputError(f"{owner}: holds {len(h.pages)} pages before token {start}")
        if h.first + len(h.pages) != first_new:
            raise InputError(
                f"{owner}: piece [{start}, {end}) does not continue its pages "
                f"(holds token pages {h.first}..{h.first + len(h.pages) - 1})"
            )
        seed = self.seed_of(owner)
        for k, pid in enumerate(self._take(n), start=first_new):
            h.pages.append(Page(pid, seed, k * p))
        runs = []
        for k in range(max(start // p, h.first), first_new + n):
            pg = h.pages[k - h.first]
            lo, hi = max(start - k * p, 0), min(end - k * p, p)
            # A page half-filled by the previous piece keeps its rows; extend them.
            if pg.lo == pg.hi:
                pg.lo, pg.hi = lo, hi
            elif pg.seed == seed and pg.pos0 == k * p:
                pg.lo, pg.hi = min(pg.lo, lo), max(pg.hi, hi)
            elif pg.tail is not None:
                pg.tail.hi = max(pg.tail.hi, hi)
            else:
                pg.hi = min(pg.hi, lo)
                pg.tail = Page(pg.id, seed, k * p, lo, hi)
            runs.append((pg.id * p + lo, hi - lo, k * p + lo, seed))
        return runs

    def batch_pages(self, pieces: Iterable[tuple[str, int, int]]) -> int:
        return sum(pages_for(self.page, s, e) for _, s, e in pieces)

    # -- after the transfer ---------------------------------------------------
    def release(self, owner: str, entries: Iterable[tuple[str, int]]) -> None:
        h = self.held.pop(owner, None)
        if h is None:
            self.notes.append(f"release {owner}: holds nothing here")
            return
        pages, i = h.pages, 0
        for key, tokens in entries:
            n = min(-(-tokens // self.page), len(pages) - i)
            if n <= 0:
                break
            self.evictable.setdefault(key, []).extend(pages[i : i + n])
            self.evictable.move_to_end(key)
            i += n
        self.free.extend(pg.id for pg in pages[i:])

    # -- what the integrity check reads --------------------------------------
    def holders(self) -> list[tuple[str, list[Page]]]:
        out = [(f"request {r}", h.pages) for r, h in self.held.items()]
        out += [(f"locked {k}", v) for k, v in self.locked.items()]
        out += [(f"cache {k}", v) for k, v in self.evictable.items()]
        return out

    def runs(self, include_free: bool = False) -> list[Run]:
        p = self.page
        return [
            (r.id * p + r.lo, r.hi - r.lo, r.pos0 + r.lo, r.seed)
            for _, pages in self.holders()
            for pg in pages
            for r in pg.records()
            if r.hi > r.lo
        ]

    def check_structure(self) -> list[str]:
        """Every page is free, cached, locked or held, exactly once."""
        seen: dict[int, str] = {}
        problems = []
        for pid in self.free:
            seen[pid] = "free"
        for name, pages in self.holders():
            for pg in pages:
                if pg.id in seen:
                    problems.append(f"page {pg.id} held by {name} and {seen[pg.id]}")
                seen[pg.id] = name
        if len(seen) != self.num_pages or not all(0 <= i < self.num_pages for i in seen):
            missing = self.num_pages - len(seen)
            problems.append(f"{missing} pages lost (neither free nor held)")
        return problems
