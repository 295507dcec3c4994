"""Causes read off the out-of-memory message's numbers alone (``arithmetic.classify``):
page granularity, eviction shortfall, a hybrid pool."""

from __future__ import annotations

from dataclasses import dataclass

from kvforensics.causes.arithmetic import Mechanism, OomArithmetic, PoolReading, classify
from kvforensics.causes.cause import Cause
from kvforensics.rounds.records import LoggedOom


@dataclass(frozen=True, slots=True)
class PoolFigures:
    """The message's arithmetic behind a pool cause (``arithmetic.OomArithmetic``)."""

    arithmetic: OomArithmetic

    @property
    def requested(self) -> int | None:
        return self.arithmetic.requested

    @property
    def free(self) -> int | None:
        return self.arithmetic.free

    @property
    def pool(self) -> str | None:
        return self.arithmetic.pool

    def as_dict(self) -> dict[str, object]:
        a = self.arithmetic
        return {
            "requested": a.requested,
            "pool": a.pool,
            "free": a.free,
            "evictable": a.evictable,
            "mechanism": a.mechanism.value,
        }


#: cause id -> the family of the message's arithmetic that shows it
FAMILIES = {
    "page_granularity": Mechanism.PAGE_GRANULARITY,
    "eviction_shortfall": Mechanism.EVICTION_SHORTFALL,
    "hybrid_pool": Mechanism.HYBRID_POOL,
}


def readings(oom: LoggedOom) -> list[PoolReading]:
    """The pool lines of a rebuilt out-of-memory record, the full pool first."""
    pools = []
    if oom.available is not None or oom.available_size is not None:
        pools.append(
            PoolReading(
                "full",
                available=oom.available,
                free=oom.available_size,
                evictable=oom.evictable_size,
            )
        )
    others = (
        ("swa", oom.swa_available, oom.swa_available_size, oom.swa_evictable_size),
        ("mamba", oom.mamba_available, oom.mamba_available_size, oom.mamba_evictable_size),
    )
    for name, total, free, evictable in others:
        if total is not None:
            pools.append(PoolReading(name, available=total, free=free, evictable=evictable))
    return pools


def pool_causes(oom: LoggedOom | None) -> list[Cause]:
    """One cause per family; held where the message's arithmetic shows it."""
    if not oom:
        return [Cause(cid, False, "no out-of-memory in these logs") for cid in FAMILIES]
    got = classify(oom.tokens, readings(oom))
    where = [oom.where] if oom.where else []
    figures = PoolFigures(got)
    out = []
    for cid, family in FAMILIES.items():
        if got.mechanism is Mechanism.UNKNOWN:
            held, summary = None, f"cannot tell: {got.reason}"
        elif got.mechanism is family:
            held, summary = True, got.reason
        else:
            held, summary = False, f"the message shows {got.mechanism.value}: {got.reason}"
        story = [f"The out-of-memory message's numbers: {got.reason}."] if held else []
        out.append(Cause(cid, held, summary, [*where, got.reason], oom.round, figures, story))
    return out
