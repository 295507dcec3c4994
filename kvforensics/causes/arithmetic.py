"""What the numbers of one out-of-memory message say by themselves.

The allocator prints, per pool, the tokens it tried to allocate (N), the free slots (A)
and the evictable cache (E). Their arithmetic alone separates the families of
`docs/causes.md`, before any round is rebuilt:

* ``N > A + E``: real exhaustion (nothing the allocator could do);
* ``A < N <= A + E``: eviction shortfall (the cache counted as evictable could not be freed);
* ``N <= A``: page granularity (it fits in tokens but not in whole pages);
* a hybrid pool (SWA, mamba) short while the full pool would fit: that pool binds.

This is the one home of that arithmetic: the stock-log analysis and the cause catalogue
both call `classify`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Mechanism(StrEnum):
    EXHAUSTION = "exhaustion"
    EVICTION_SHORTFALL = "eviction_shortfall"
    PAGE_GRANULARITY = "page_granularity"
    HYBRID_POOL = "hybrid_pool"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class PoolReading:
    """One pool's line of the message; a field is None where the message does not print it.

    Args:
        pool: "full", "swa" or "mamba".
        available: the total printed for the pool (free + evictable when both are printed).
        free: the free slots (`available_size`), if printed.
        evictable: the evictable cache (`evictable_size`), if printed.
    """

    pool: str
    available: int | None = None
    free: int | None = None
    evictable: int | None = None

    def total(self) -> int | None:
        """Free plus evictable: what the allocator could have had at most."""
        if self.free is not None and self.evictable is not None:
            return self.free + self.evictable
        return self.available

    def free_now(self) -> int | None:
        """Free without evicting; the printed total when only that is known and nothing evictable."""
        if self.free is not None:
            return self.free
        if self.evictable == 0:
            return self.available
        return None


@dataclass(frozen=True, slots=True)
class OomArithmetic:
    """The mechanism one message's numbers show, and the pool that binds."""

    mechanism: Mechanism
    pool: str | None
    requested: int | None
    free: int | None
    evictable: int | None
    reason: str


def _single(requested: int, r: PoolReading) -> OomArithmetic | None:
    """The family for one pool, or None when the pool would have fit the request."""
    total, free = r.total(), r.free_now()
    if total is not None and requested > total:
        why = f"{requested} requested > {total} free + evictable in the {r.pool} pool"
        return OomArithmetic(Mechanism.EXHAUSTION, r.pool, requested, free, r.evictable, why)
    if free is not None and total is not None and free < requested <= total:
        why = (
            f"{requested} requested <= {total} free + evictable but > {free} free in the "
            f"{r.pool} pool: the evictable cache could not be freed in time"
        )
        return OomArithmetic(
            Mechanism.EVICTION_SHORTFALL, r.pool, requested, free, r.evictable, why
        )
    return None


def classify(requested: int | None, pools: list[PoolReading]) -> OomArithmetic:
    """The mechanism the message's numbers show.

    Args:
        requested: N of `Try to allocate N tokens`, or None when the message lacks it.
        pools: the pool lines in the message, the full pool first.

    Returns:
        The family, the binding pool and a one-line reason; `UNKNOWN` when the numbers
        needed are missing (never a guess).
    """
    if requested is None or not pools:
        return OomArithmetic(
            Mechanism.UNKNOWN,
            None,
            requested,
            None,
            None,
            "the message gives no requested size or no pool numbers",
        )
    full, others = pools[0], pools[1:]
    full_short = _single(requested, full)
    full_total = full.total()
    # NOTE: the full pool "would fit" when its free + evictable covers the request; a
    # second pool exhausted then is the binding one even if the full pool had to evict.
    full_fits = full_total is not None and requested <= full_total
    for other in others:
        short = _single(requested, other)
        if short is not None and short.mechanism is Mechanism.EXHAUSTION and full_fits:
            why = f"{short.reason}, while the {full.pool} pool would have fit"
            return OomArithmetic(
                Mechanism.HYBRID_POOL, other.pool, requested, short.free, short.evictable, why
            )
    if full_short is not None:
        return full_short
    free = full.free_now()
    if free is not None and requested <= free:
        why = (
            f"{requested} requested <= {free} free in the {full.pool} pool: it fits in "
            "tokens but not in whole pages"
        )
        return OomArithmetic(
            Mechanism.PAGE_GRANULARITY, full.pool, requested, free, full.evictable, why
        )
    return OomArithmetic(
        Mechanism.UNKNOWN,
        full.pool,
        requested,
        free,
        full.evictable,
        "the printed numbers do not place the request in any family",
    )
