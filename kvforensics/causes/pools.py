"""Causes read off the out-of-memory message's numbers alone (``arithmetic.classify``):
page granularity, eviction shortfall, a hybrid pool."""

from __future__ import annotations

from kvforensics.causes.arithmetic import Mechanism, PoolReading, classify
from kvforensics.causes.cause import Cause

#: cause id -> the family of the message's arithmetic that shows it
FAMILIES = {
    "page_granularity": Mechanism.PAGE_GRANULARITY,
    "eviction_shortfall": Mechanism.EVICTION_SHORTFALL,
    "hybrid_pool": Mechanism.HYBRID_POOL,
}


def readings(oom: dict) -> list[PoolReading]:
    """The pool lines of a rebuilt out-of-memory record, the full pool first."""
    pools = []
    if oom.get("available") is not None or oom.get("available_size") is not None:
        pools.append(
            PoolReading(
                "full",
                available=oom.get("available"),
                free=oom.get("available_size"),
                evictable=oom.get("evictable_size"),
            )
        )
    for name in ("swa", "mamba"):
        total = oom.get(f"{name}_available")
        if total is not None:
            pools.append(
                PoolReading(
                    name,
                    available=total,
                    free=oom.get(f"{name}_available_size"),
                    evictable=oom.get(f"{name}_evictable_size"),
                )
            )
    return pools


def pool_causes(oom: dict | None) -> list[Cause]:
    """One cause per family; held where the message's arithmetic shows it."""
    if not oom:
        return [Cause(cid, False, "no out-of-memory in these logs") for cid in FAMILIES]
    got = classify(oom.get("tokens"), readings(oom))
    where = [oom["where"]] if oom.get("where") else []
    figures = {
        "requested": got.requested,
        "pool": got.pool,
        "free": got.free,
        "evictable": got.evictable,
        "mechanism": got.mechanism.value,
    }
    out = []
    for cid, family in FAMILIES.items():
        if got.mechanism is Mechanism.UNKNOWN:
            held, summary = None, f"cannot tell: {got.reason}"
        elif got.mechanism is family:
            held, summary = True, got.reason
        else:
            held, summary = False, f"the message shows {got.mechanism.value}: {got.reason}"
        story = [f"The out-of-memory message's numbers: {got.reason}."] if held else []
        out.append(
            Cause(cid, held, summary, [*where, got.reason], oom.get("round"), dict(figures), story)
        )
    return out
