"""The cyclic garbage collector's pace during a long run of the model or a pass over a
log's rounds.

Both make millions of short-lived records (events, rounds, a model node for every round
re-run) and keep many (a window of rounds, a ledger row per step). Every 700 net
allocations (the collector's default first threshold) the collector walks the young
objects, every tenth time the middle generation too, now and then everything: measured, a
sixth of a replay's CPU time and over a quarter of the adder's on a growing ledger, for
almost no cyclic garbage (the records are freed by reference counting as they go). The
first threshold is raised for the run and put back after.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: net allocations between two young collections during a run (a few MB of garbage at most)
PASS_THRESHOLD = 50_000


@contextmanager
def fewer_collections(threshold: int = PASS_THRESHOLD) -> Iterator[None]:
    """Collect the youngest generation every ``threshold`` net allocations (never more
    often than the thresholds already set), restoring them on the way out."""
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], threshold), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


@contextmanager
def held_off() -> Iterator[None]:
    """No collection at all for a stretch that makes no cyclic garbage (reference
    counting frees all it drops), where the collector would only walk the objects it
    keeps again and again: a byte-range worker (a full collection after one finds
    nothing unreachable) and the join's pass over the rounds it reads back."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
