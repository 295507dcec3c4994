"""How long KV transfers take, read off the log.

A prefill node gets memory back only when a finished request's KV has reached its decode
node. So the baseline's rises between logged rounds (the next round's observed baseline
minus what the previous round left, derived) are transfer completions, and each finished
request is one that will complete. Shifting the finished tokens by a latency ``T`` and
matching them against the rises, over the ordinary traffic before the incident, gives ``T``.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from itertools import accumulate, chain, islice
from typing import Protocol

from kvforensics.model import Config
from kvforensics.model.sizing import ceil_page
from kvforensics.rounds import Rebuild, Round
from kvforensics.rounds.compact import Spool
from kvforensics.rounds.stream import finished


class Traffic:
    """Observed baseline rises and finished requests, gathered as rounds stream by (in
    index order): (round, seconds since the first timed round, tokens), spooled (a 2 GB
    log has over a million of each)."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.t0: datetime | None = None
        self.prev: Round | None = None  # the last timed round
        self.frees, self.finishes = Spool("qdq"), Spool("qdq")

    def add(self, r: Round, seq_lens: dict[str, int], done: list[str] | None = None) -> None:
        """``done``: ``finished(r, seq_lens)`` where the caller has it already."""
        if r.time is None:
            return
        if self.t0 is None:
            self.t0 = r.time
        t = (r.time - self.t0).total_seconds()
        prev = self.prev
        if (
            prev is not None
            and prev.baseline_end is not None
            and r.decisions
            and r.baseline
            and r.baseline.value is not None
            and prev.baseline_end.value is not None
            and prev.time is not None
        ):
            rise = r.baseline.value - prev.baseline_end.value
            # A long silence in the log is not a measurement of the node.
            if rise > 0 and (r.time - prev.time).total_seconds() <= 60:
                self.frees.push(r.index, t, rise)
        page = self.cfg.page_size
        for rid in finished(r, seq_lens) if done is None else done:
            d = next((d for d in r.decisions if d.rid == rid), None)
            dev = d.prefix_len if d else 0
            # ``cfg.ceil_page``, called compiled
            self.finishes.push(r.index, t, ceil_page(seq_lens[rid], page) - dev)
        self.prev = r

    def before(self, index: int) -> tuple[Pairs, Pairs]:
        """(round, seconds, tokens) of rises and of finished requests in rounds before ``index``,
        read back from the spools as they are iterated (as Python tuples they took more
        memory than the whole stream)."""
        return Pairs(self.frees, index), Pairs(self.finishes, index)


class Pairs:
    """The (round, seconds, tokens) of one spool's entries in rounds before ``index``.

    NOTE: rounds are added in index order, so those entries are the spool's first ones."""

    __slots__ = ("n", "spool")

    def __init__(self, spool: Spool, index: int) -> None:
        self.spool, self.n = spool, 0
        for rounds, _, _ in spool.chunks():
            cut = bisect_left(rounds, index)
            self.n += cut
            if cut < len(rounds):
                break

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[tuple[int, float, int]]:
        rows = (zip(r, t, n, strict=True) for r, t, n in self.spool.chunks())
        return islice(chain.from_iterable(rows), self.n)


def frees_and_finishes(rb: Rebuild, before: int) -> tuple[Pairs, Pairs]:
    """(round, seconds, tokens) of observed baseline rises, and of requests that finished,
    in the logged rounds before round ``before``."""
    traffic = Traffic(rb.cfg)
    for r in rb.rounds:
        if r.index >= before:
            break
        traffic.add(r, rb.seq_lens)
    return traffic.before(before)


class Timeline(Protocol):
    """(round, seconds, tokens) in round order, and how many: ``Pairs``, or a plain list of
    them."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[tuple[int, float, int]]: ...


def estimate_latency(
    frees: Timeline, finishes: Timeline
) -> tuple[float, tuple[float, float]] | None:
    """Median delay between a request finishing and its memory coming back.

    Transfers end roughly in the order requests finished, so each observed rise is paid
    out of the oldest finished requests not yet returned (first in, first out). A rise is
    read at a logged round's first check, before that round's forward: only requests that
    finished in an earlier round can have paid it (one that finished in the same second,
    in that round or later, had not begun its transfer). Returns (median seconds, (25th,
    75th percentile)) or None when there is too little to go on.
    """
    if len(frees) < 20 or len(finishes) < 20:
        return None
    queue = iter(finishes)  # oldest first; ``head`` is the next one not yet paid out
    head = next(queue, None)
    # delay -> how many: a log's stamps give few distinct delays, so this stays small
    delays: Counter[float] = Counter()
    for at, t, amount in frees:
        paid = 0
        while head is not None and paid < amount and head[0] < at and head[1] <= t:
            _, t_fin, n = head
            paid += n
            delays[t - t_fin] += 1
            head = next(queue, None)
    if delays.total() < 20:
        return None
    return median_and_quartiles(delays)


def median_and_quartiles(counts: Counter[float]) -> tuple[float, tuple[float, float]]:
    """``statistics.median`` and the first and third of ``statistics.quantiles(n=4)`` of
    the values ``counts`` holds (each as often as counted; at least two), computed as they
    compute them, without the sorted list of every value."""
    values = sorted(counts)
    ends = list(accumulate(counts[v] for v in values))
    n = ends[-1]

    def at(k: int) -> float:  # the k-th (from 0) of the values in order
        return values[bisect_right(ends, k)]

    mid = at(n // 2) if n % 2 else (at(n // 2 - 1) + at(n // 2)) / 2
    quarts = []
    for i in (1, 3):  # the "exclusive" method's interpolation
        j = min(max(i * (n + 1) // 4, 1), n - 1)
        delta = i * (n + 1) - j * 4
        quarts.append((at(j - 1) * (4 - delta) + at(j) * delta) / 4)
    return mid, (quarts[0], quarts[1])
