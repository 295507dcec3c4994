"""How long KV transfers take, read off the log.

A prefill node gets memory back only when a finished request's KV has reached its decode
node. So the baseline's rises between logged rounds (the next round's observed baseline
minus what the previous round left, derived) are transfer completions, and each finished
request is one that will complete. Shifting the finished tokens by a latency ``T`` and
matching them against the rises, over the ordinary traffic before the incident, gives ``T``.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from itertools import islice
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

    def before(self, index: int) -> tuple[Pairs, Pairs]:
        """(seconds, tokens) of rises and of finished requests in rounds before ``index``,
        as views of the arrays (a 2 GB log has over a million of each: as Python tuples
        they took more memory than the whole stream)."""
        return Pairs(self.frees, index), Pairs(self.finishes, index)


class Pairs:
    """The (seconds, tokens) of one column set's entries in rounds before ``index``.

    NOTE: rounds are added in index order, so those entries are a prefix of the arrays."""

    __slots__ = ("cols", "n")

    def __init__(self, cols, index: int) -> None:
        self.cols, self.n = cols, bisect_left(cols[0], index)

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return islice(zip(self.cols[1], self.cols[2], strict=True), self.n)


def _push(cols, index: int, t: float, tokens: int) -> None:
    cols[0].append(index)
    cols[1].append(t)
    cols[2].append(tokens)


def frees_and_finishes(rb: Rebuild, before: int) -> tuple[Pairs, Pairs]:
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
    queue = iter(finishes)  # oldest first; ``head`` is the next one not yet paid out
    head = next(queue, None)
    delays = array("d")
    for t, amount in frees:
        paid = 0
        while head is not None and paid < amount and head[0] <= t:
            t_fin, n = head
            paid += n
            delays.append(t - t_fin)
            head = next(queue, None)
    if len(delays) < 20:
        return None
    q = quantiles(delays, n=4)
    return median(delays), (q[0], q[2])
