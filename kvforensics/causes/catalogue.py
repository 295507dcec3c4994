"""The catalogue: every detector, run on every replay (``docs/causes.md``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvforensics.causes.cause import Cause
from kvforensics.causes.external import external_allocation, forced_resume
from kvforensics.causes.pages import page_ask, with_pieces
from kvforensics.causes.pools import pool_causes
from kvforensics.causes.tail import root_cause, unreserved_tail

if TYPE_CHECKING:
    from kvforensics.causes.replayed import Replayed

#: catalogue order (the JSON lists causes in this order)
IDS = (
    "unreserved_tail",
    "external_allocation",
    "forced_resume",
    "page_granularity",
    "eviction_shortfall",
    "hybrid_pool",
)


def find_causes(rr: Replayed) -> list[Cause]:
    """Every cause of the catalogue for one replay (``replay.ReplayResult``, ``causes.replayed.Replayed``)."""
    ask = page_ask(rr) if rr.rebuild.oom else None
    page = rr.rebuild.cfg.page_size
    pools = [
        with_pieces(c, ask, page) if c.id == "page_granularity" else c
        for c in pool_causes(rr.rebuild.oom)
    ]
    return [unreserved_tail(rr, root_cause(rr)), external_allocation(rr), forced_resume(rr), *pools]


def in_order(causes: Sequence[Cause]) -> list[Cause]:
    """The held causes in order of events (a cause without a round last)."""
    held = [c for c in causes if c.held]
    return sorted(held, key=lambda c: (c.round is None, c.round or 0, IDS.index(c.id)))
