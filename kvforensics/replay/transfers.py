"""How long KV transfers take, read off the log.

A prefill node gets memory back only when a finished request's KV has reached its decode
node. So the baseline's rises between logged rounds (the next round's observed baseline
minus what the previous round left, derived) are transfer completions, and each finished
request is one that will complete. Shifting the finished tokens by a latency ``T`` and
matching them against the rises, over the ordinary traffic before the incident, gives ``T``.
"""

from __future__ import annotations

from array import array
from collections import deque
from statistics import median, quantiles

from kvforensics.model import Config
from kvforensics.rounds import Rebuild, Round


class Traffic:
    """Observed baseline rises and finished requests, gathered as rounds stream by (in
    index order): (round, seconds since the first timed round, tokens) in compact arrays."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.t0 = None
        self.prev: Round | None = None  # the last timed round
        self.frees = (array("q"), array("d"), array("q"))
        self.finishes = (array("q"), array("d"), array("q"))

    def add(self, r: Round, seq_lens: dict[str, int]) -> None:
        if r.time is None:
            return
        if self.t0 is None:
            self.t0 = r.time
        t = (r.time - self.t0).total_seconds()
        prev = self.prev
        if prev is not None and prev.baseline_end is not None and r.decisions and r.baseline:
            gap = (r.time - prev.time).total_seconds()
            rise = r.baseline.value - prev.baseline_end.value
            # A long silence in the log is not a measurement of the node.
            if rise > 0 and gap <= 60:
                _push(self.frees, r.index, t, rise)
        for p in r.pieces:
            seq = seq_lens.get(p.rid)
            if seq is not None and p.end == seq:
                d = next((d for d in r.decisions if d.rid == p.rid), None)
                dev = d.prefix_len if d else 0
                _push(self.finishes, r.index, t, self.cfg.ceil_page(seq) - dev)
        self.prev = r

    def before(self, index: int) -> tuple[list[tuple[float, int]], list[tuple[float, int]]]:
        """(seconds, tokens) of rises and of finished requests in rounds before ``index``."""
        return _cut(self.frees, index), _cut(self.finishes, index)


def _push(cols, index: int, t: float, tokens: int) -> None:
    cols[0].append(index)
    cols[1].append(t)
    cols[2].append(tokens)


def _cut(cols, index: int) -> list[tuple[float, int]]:
    return [(t, n) for i, t, n in zip(*cols, strict=True) if i < index]


def frees_and_finishes(
    rb: Rebuild, before: int
) -> tuple[list[tuple[float, int]], list[tuple[float, int]]]:
    """(seconds, tokens) of observed baseline rises, and of requests that finished, in the
    logged rounds before round ``before``."""
    traffic = Traffic(rb.cfg)
    for r in rb.rounds:
        if r.index >= before:
            break
        traffic.add(r, rb.seq_lens)
    return traffic.before(before)


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
