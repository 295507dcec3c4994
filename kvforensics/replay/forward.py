"""What the forward runs start from: the KV transfer time the replay settled on, and the
node builder that puts a fresh node at the start round under a policy with the facts of
the world the replay found (arrivals, transfers in flight, outside allocations)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from kvforensics.model import PrefillNode, Timing
from kvforensics.model.profiles import FORK, Profile
from kvforensics.replay.arrivals import Shown
from kvforensics.replay.state import Eviction, arrivals_after, eviction_schedule, node_at
from kvforensics.rounds import Rebuild, Round

LOWER_BOUND = "no transfer ended before the crash (lower bound)"
#: a counterfactual that never drains its queue is cut off here
MAX_ROUNDS = 10_000


@dataclass(frozen=True, slots=True)
class TransferEstimate:
    """The KV transfer time the replay ran with, how it was arrived at, and the other
    values the same log supports (label -> seconds), for a reader to weigh."""

    seconds: float
    how: str  # given | inferred | derived | assumed
    alternatives: dict[str, float]


@dataclass(frozen=True, slots=True)
class NodeBuilder:
    """A fresh node at the start round under a policy (what the forward runs, the
    sensitivity and cost re-runs, ``exec`` and ``reproduce`` start from): the rebuilt
    state there, the requests first shown since (``shown``), the transfers in flight and
    the round length (``timing``), the outside allocations every policy replays
    (``outside``: round -> slots) and the time before which no transfer ends."""

    rebuild: Rebuild
    start: Round
    shown: tuple[Shown, ...]
    timing: Timing
    inflight: tuple[tuple[str, int, float], ...]
    unevictable: int = 0
    swa_pool_size: int | None = None
    profile: Profile = FORK
    outside: Mapping[int, int] = field(default_factory=dict)
    hold_until: float = -math.inf
    #: the cache evictions the logs show after the start, replayed under every policy
    evictions: tuple[Eviction, ...] = ()

    def held(self, outside: Mapping[int, int], until: float) -> NodeBuilder:
        """The same start with other outside allocations and no transfer ending before
        ``until`` (what anchoring to the observations finds)."""
        return replace(self, outside=outside, hold_until=until)

    def build(
        self, policy: str, *, seconds: float | None = None, events: Mapping[int, int] | None = None,
        hold: float | None = None, record: bool = True,
    ) -> PrefillNode:  # fmt: skip
        """``seconds``: another KV transfer time (the same transfers, each ending that much
        later or earlier); ``events``: other outside allocations; ``hold``: no transfer ends
        before it; ``record``: keep the ledger and the pool's op log."""
        t, inf = self.timing, list(self.inflight)
        arrivals = arrivals_after(self.shown, self.start, self.timing.round_overhead_s)
        if seconds is not None:  # same transfers, each ending ``shift`` later
            shift = seconds - self.timing.transfer_latency_s
            t = replace(self.timing, transfer_latency_s=seconds)
            inf = [(rid, n, at + shift) for rid, n, at in self.inflight]
        return node_at(
            self.rebuild, self.start, policy, arrivals=arrivals, inflight=inf, timing=t,
            outside=dict(self.outside if events is None else events),
            unevictable=self.unevictable, swa_pool_size=self.swa_pool_size,
            profile=self.profile, ops=record, record=record,
            hold_until=self.hold_until if hold is None else hold,
            evictions=eviction_schedule(self.evictions) if self.evictions else None,
        )  # fmt: skip
