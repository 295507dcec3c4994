"""How long KV transfers take, read off the log.

A prefill node gets memory back only when a finished request's KV has reached its decode
node. So the baseline's rises between logged rounds (the next round's observed baseline
minus what the previous round left, derived) are transfer completions, and each finished
request is one that will complete. Shifting the finished tokens by a latency ``T`` and
matching them against the rises, over the ordinary traffic before the incident, gives ``T``.
"""

from __future__ import annotations

from collections import deque
from statistics import median, quantiles

from kvforensics.rounds import Rebuild


def frees_and_finishes(
    rb: Rebuild, before: int
) -> tuple[list[tuple[float, int]], list[tuple[float, int]]]:
    """(seconds, tokens) of observed baseline rises, and of requests that finished, in the
    logged rounds before round ``before``."""
    rounds = [r for r in rb.rounds[:before] if r.time is not None]
    if not rounds:
        return [], []
    t0 = rounds[0].time
    frees, finishes = [], []
    prev = None
    for r in rounds:
        t = (r.time - t0).total_seconds()
        if prev is not None and prev.baseline_end is not None and r.decisions and r.baseline:
            gap = (r.time - prev.time).total_seconds()
            rise = r.baseline.value - prev.baseline_end.value
            # A long silence in the log is not a measurement of the node.
            if rise > 0 and gap <= 60:
                frees.append((t, rise))
        for p in r.pieces:
            seq = rb.seq_lens.get(p.rid)
            if seq is not None and p.end == seq:
                d = next((d for d in r.decisions if d.rid == p.rid), None)
                dev = d.prefix_len if d else 0
                finishes.append((t, rb.cfg.ceil_page(seq) - dev))
        prev = r
    return frees, finishes


def estimate_latency(frees, finishes):
    """Median delay between a request finishing and its memory coming back.

    Transfers end roughly in the order requests finished, so each observed rise is paid
    out of the oldest finished requests not yet returned (first in, first out). Returns
    (median seconds, (25th, 75th percentile)) or None when there is too little to go on.
    """
    if len(frees) < 20 or len(finishes) < 20:
        return None
    queue = deque(finishes)
    delays: list[float] = []
    for t, amount in frees:
        paid = 0
        while queue and paid < amount and queue[0][0] <= t:
            t_fin, n = queue.popleft()
            paid += n
            delays.append(t - t_fin)
    if len(delays) < 20:
        return None
    q = quantiles(delays, n=4)
    return median(delays), (q[0], q[2])
