"""Other ranks' lines against the deciding rank's rounds.

PP3 prints the batch lines (``#new-token`` = sum of raw piece lengths); other PP ranks
print the plan they replay. Each is matched to the rebuilt rounds by content and time,
from the end of the logs backwards (every rank's log ends at the same crash), so that one
extra or missing round is one local finding; then compared number by number.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import polars as pl

from kvforensics.rounds.compact import Spool, pack_time, unpack_time
from kvforensics.rounds.provenance import where
from kvforensics.rounds.rebuild import Rebuild, Round
from kvforensics.rounds.records import BatchLine, Contradiction, PlanReplay

#: whether a round and a line agree
Same = Callable[["Key", "Line"], bool]
#: a round and a line paired; None on the side that has no partner
Pair = tuple["Key | None", "Line | None"]
#: the first and last time of something
TimeSpan = tuple[datetime, datetime]
T = TypeVar("T")


@dataclass(frozen=True, slots=True, eq=False)
class Line:
    """Another rank's line (a batch line or a replayed plan): the fields the checks read,
    None where the line's format lacks one. Compared by identity: two lines that print
    the same are still two lines."""

    where: str
    time: datetime | None = None
    new_token: int | None = None
    new_seq: int | None = None
    inflight_req: int | None = None
    queue_req: int | None = None
    cached_token: int | None = None
    rids: list[str] | None = None
    extend_tokens: int | None = None


def _lines_from_rows(frame: pl.DataFrame) -> list[Line]:
    """The reader's rows of one rank's lines (``_lines``' columns, those the logs have)."""
    return [
        Line(
            where(r),
            r.get("time"),
            r.get("new_token"),
            r.get("new_seq"),
            r.get("inflight_req"),
            r.get("queue_req"),
            r.get("cached_token"),
            r.get("rids"),
            r.get("extend_tokens"),
        )
        for r in frame.iter_rows(named=True)
    ]


@dataclass(slots=True)
class Key:
    """What the cross-checks compare of a round with pieces: its index, time, the tokens
    of its pieces and their requests; ``round`` is the round itself when it is kept (a
    streamed replay keeps only some: the others are checked by these numbers alone)."""

    index: int
    time: datetime | None
    new_tokens: int
    rids: int  # hash of the pieces' request ids, in order
    round: Round | None = None

    def same_rids(self, rids: list[str]) -> bool:
        if self.round is not None:
            return [p.rid for p in self.round.pieces] == rids
        return hash(tuple(rids)) == self.rids


class RoundKeys:
    """The keys of every round with pieces, spooled (a few dozen bytes a round, out of
    memory once there are many), gathered as rounds stream by; the kept rounds are
    attached by index at the end."""

    def __init__(self) -> None:
        #: index, time, tokens, hash of the request ids, whether it ran out of memory
        self._rows = Spool("qqqqb")
        self.kept: dict[int, Round] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, rnd: Round, keep: bool = False) -> None:
        if not rnd.pieces:
            return
        rids = hash(tuple(p.rid for p in rnd.pieces))
        self._rows.push(rnd.index, pack_time(rnd.time), rnd.new_tokens(), rids, rnd.oom is not None)
        if keep:
            self.kept[rnd.index] = rnd

    @classmethod
    def of(cls, rounds: list[Round]) -> RoundKeys:
        keys = cls()
        for r in rounds:
            keys.add(r, keep=True)
        return keys

    def _key(self, row: tuple[Any, ...]) -> Key:
        index, t, tokens, rids, _ = row
        return Key(index, unpack_time(t), tokens, rids, self.kept.get(index))

    def with_pieces(self) -> list[Key]:
        return [self._key(row) for row in self._rows.rows()]

    def forwarded(self) -> list[Key]:
        return [self._key(row) for row in self._rows.rows() if not row[4]]


def _align(rounds: list[Key], lines: list[Line], same: Same) -> list[Pair]:
    """Pair rounds with another rank's lines from the end of the logs backwards (every
    rank's log ends at the same crash), by content: where a pair disagrees, a round or a
    line that the next few would match is skipped, so one extra or missing round stays a
    local finding instead of shifting every pair before it. ``same(round, line)`` says
    whether they agree. Unpaired items come back with None on the other side."""
    out: list[Pair] = []
    i, j = len(rounds) - 1, len(lines) - 1
    while i >= 0 and j >= 0:
        if same(rounds[i], lines[j]):
            out.append((rounds[i], lines[j]))
            i, j = i - 1, j - 1
            continue
        skip = _resync(rounds, lines, i, j, same)
        if skip is None:
            out.append((rounds[i], lines[j]))  # a real disagreement, in place
            i, j = i - 1, j - 1
        elif skip[0]:
            out.extend((rounds[i - k], None) for k in range(skip[0]))
            i -= skip[0]
        else:
            out.extend((None, lines[j - k]) for k in range(skip[1]))
            j -= skip[1]
    return out


def _resync(
    rounds: list[Key], lines: list[Line], i: int, j: int, same: Same, reach: int = 3, run: int = 3
) -> tuple[int, int] | None:
    """The fewest rounds (or lines) to skip so that the next ``run`` pairs agree, taken
    from the side that has more left."""

    def agrees(a: int, b: int) -> bool:
        n = min(run, a + 1, b + 1)
        return n > 0 and all(same(rounds[a - k], lines[b - k]) for k in range(n))

    # Skip only from the side with more left: with as many rounds as lines, a pair that
    # disagrees is a disagreement, not a missing round.
    for k in range(1, reach + 1):
        if i > j and i - k >= 0 and agrees(i - k, j):
            return (k, 0)
        if j > i and j - k >= 0 and agrees(i, j - k):
            return (0, k)
    return None


def _seconds_apart(rnd: Key, line: Line) -> float | None:
    if rnd.time is None or line.time is None:
        return None
    apart: timedelta = line.time - rnd.time
    return abs(apart.total_seconds())


def _unpaired(
    rb: Rebuild, rank: str, what: str, pairs: list[Pair], span_r: TimeSpan | None,
    span_l: TimeSpan | None,
) -> None:
    """One finding per line that no round matches and per round that no line matches,
    each only inside the other side's time span (logs of different lengths are common)."""
    for rnd, line in pairs:
        if rnd is None and line is not None and _within(line.time, span_r):
            rb.contradictions.append(Contradiction(
                None, what, f"{rank} line {line.where} matches no rebuilt round of {rb.rank}"
            ))
        elif line is None and rnd is not None and _within(rnd.time, span_l):
            rb.contradictions.append(Contradiction(
                rnd.index,
                what,
                f"no {rank} line matches round {rnd.index}: a round {rank} did not "
                "run, or one the rebuild should not have",
            ))


def _within(t: datetime | None, span: TimeSpan | None) -> bool:
    return t is None or span is None or span[0] <= t <= span[1]


#: seconds between a round and another rank's line about it, at most (1-second stamps,
#: a forward in between)
NEAR_S = 5


def _near(rnd: Key, line: Line) -> bool:
    gap = _seconds_apart(rnd, line)
    return gap is None or gap <= NEAR_S


def _span(items: Sequence[T], time_of: Callable[[T], datetime | None]) -> TimeSpan | None:
    times = [t for t in map(time_of, items) if t is not None]
    return (min(times), max(times)) if times else None


def _pairs(
    rb: Rebuild, rank: str, what: str, rounds: list[Key], lines: list[Line], same: Same
) -> list[tuple[Key, Line]]:
    """Aligned pairs of both sides; the unpaired ones inside the other side's time span are
    findings."""
    pairs = _align(rounds, lines, same)
    paired_r = {r.index for r, _ in pairs if r is not None}
    paired_l = {id(ln) for _, ln in pairs if ln is not None}
    pairs += [(r, None) for r in rounds if r.index not in paired_r]
    pairs += [(None, ln) for ln in lines if id(ln) not in paired_l]
    span_r = _span(rounds, lambda r: r.time)
    span_l = _span(lines, lambda ln: ln.time)
    _unpaired(
        rb, rank, what, [(r, ln) for r, ln in pairs if r is None or ln is None], span_r, span_l
    )
    return [(r, ln) for r, ln in pairs if r is not None and ln is not None]


#: every rank's log ends at the same crash; ends further apart than this are different runs
END_SLACK_S = 60.0

#: per rank: its first and last time and its files
Span = tuple[datetime, datetime, list[str]]
#: the columns of a batch line or a plan the checks read
_LINE_COLS = ("kind", "rank", "file", "line", "time", "new_token", "new_seq", "inflight_req",
              "queue_req", "cached_token", "rids", "extend_tokens")  # fmt: skip


def spans_of(events: pl.DataFrame) -> dict[str, Span]:
    """Each rank's time span (ranks whose lines carry a time)."""
    if not events.height or "time" not in events.columns:
        return {}
    ev = events.filter(pl.col("time").is_not_null() & pl.col("rank").is_not_null())
    if not ev.height:
        return {}
    g = ev.group_by("rank").agg(
        pl.col("time").min().alias("t0"),
        pl.col("time").max().alias("t1"),
        pl.col("file").unique().alias("files"),
    )
    return {r: (t0, t1, sorted(f)) for r, t0, t1, f in g.iter_rows()}


def merge_spans(a: dict[str, Span], b: dict[str, Span]) -> dict[str, Span]:
    """Two readings' spans as one (a log read in batches)."""
    out = dict(a)
    for rank, (t0, t1, files) in b.items():
        if rank in out:
            u0, u1, uf = out[rank]
            out[rank] = (min(t0, u0), max(t1, u1), sorted(set(uf) | set(files)))
        else:
            out[rank] = (t0, t1, files)
    return out


def _apart(rb: Rebuild, spans: dict[str, Span], rank: str) -> bool:
    """True (and one contradiction recorded) when ``rank``'s lines cannot be paired with
    the deciding rank's rounds from the end: their times do not overlap, or they end far
    apart. Without times there is nothing to tell, so they are compared."""
    ours, theirs = spans.get(rb.rank), spans.get(rank)
    if ours is None or theirs is None:
        return False
    (a0, a1, af), (b0, b1, bf) = ours, theirs
    if b0 > a1 or a0 > b1:
        why = "their time ranges do not overlap"
    elif abs((b1 - a1).total_seconds()) > END_SLACK_S:
        why = f"they end {abs((b1 - a1).total_seconds()):.0f} s apart, so not at the same crash"
    else:
        return False
    rb.contradictions.append(
        Contradiction(
            None,
            "different times",
            f"{rank} ({', '.join(bf)}: {b0} to {b1}) and {rb.rank} "
            f"({', '.join(af)}: {a0} to {a1}): {why}; {rank}'s lines are not compared",
        )
    )
    return True


def _lines(events: pl.DataFrame, kind: str) -> pl.DataFrame:
    if "kind" not in events.columns:
        return pl.DataFrame()
    ev = events.filter(pl.col("kind") == kind).sort(["file", "line"])
    return ev.select([c for c in _LINE_COLS if c in ev.columns])


def cross_check(
    rb: Rebuild,
    events: pl.DataFrame,
    *,
    keys: RoundKeys | None = None,
    spans: dict[str, Span] | None = None,
) -> list[Round]:
    """Attach PP3 batch lines and PP replay plans to ``rb``'s rounds; record contradictions.

    ``keys``: every round's key when ``rb.rounds`` holds only some of them, and ``spans``
    each rank's time span when ``events`` lacks the deciding rank's own lines (a streamed
    read). Returns the silent rounds another rank's lines added at the end."""
    if keys is None:
        if not rb.rounds:
            return []  # nothing to compare against (the deciding rank printed no round)
        keys = RoundKeys.of(rb.rounds)
    spans = spans if spans is not None else spans_of(events)
    added: list[Round] = []
    batches = _lines(events, "prefill_batch")
    for rank in batches["rank"].unique().sort().to_list() if batches.height else []:
        if not _apart(rb, spans, rank):
            lines = _lines_from_rows(batches.filter(pl.col("rank") == rank))
            added += _check_batches(rb, keys, rank, lines)
    plans = _lines(events, "replay_plan")
    for rank in plans["rank"].unique().sort().to_list() if plans.height else []:
        if not _apart(rb, spans, rank):
            _check_plans(rb, keys, rank, _lines_from_rows(plans.filter(pl.col("rank") == rank)))
    return added


def _check_batches(rb: Rebuild, keys: RoundKeys, rank: str, lines: list[Line]) -> list[Round]:
    extra = len(lines) - len(keys.forwarded())
    added: list[Round] = []
    if extra > 0 and rb.pending:
        # PP0's log ends while a request is still chunked; PP3 shows its later (silent) rounds.
        before = len(rb.rounds)
        rb.extend_silent(
            extra, f"{rank} printed {extra} batch line(s) after {rb.rank}'s last round"
        )
        added = rb.rounds[before:]
        for r in added:
            keys.add(r, keep=True)

    def same(rnd: Key, b: Line) -> bool:
        return b.new_token == rnd.new_tokens and _near(rnd, b)

    for key, b in _pairs(rb, rank, "batch line", keys.forwarded(), lines, same):
        if key.round is not None:
            # NOTE: a line of another batch format may lack some fields; None, not an error
            key.round.batch = BatchLine(
                rank, b.new_token, b.new_seq, b.inflight_req, b.queue_req, b.cached_token, b.where
            )
        if b.new_token is None:
            continue  # the line gives no token count (damaged, or a format without it)
        total = key.new_tokens
        _settle(
            rb,
            key,
            b.new_token == total,
            "#new-token",
            f"{b.where} says #new-token: {b.new_token}, the rebuilt pieces sum to {total}",
            f"{rank} batch line {b.where}: #new-token: {b.new_token}",
        )
    return added


def _misfits(rounds: list[Key], lines: list[Line], same: Same) -> int:
    """How many rounds and lines an alignment leaves unpaired or disagreeing."""
    return sum(r is None or ln is None or not same(r, ln) for r, ln in _align(rounds, lines, same))


def _check_plans(rb: Rebuild, keys: RoundKeys, rank: str, lines: list[Line]) -> None:
    def same(rnd: Key, p: Line) -> bool:
        return (
            rnd.same_rids(list(p.rids or []))
            and p.extend_tokens == rnd.new_tokens
            and _near(rnd, p)
        )

    # The plan of the crashing round may or may not have reached this rank: the reading
    # that pairs the lines with fewer misfits (a last line the size of the out-of-memory
    # piece may as well be the round before it, when the pieces are all one chunk).
    targets = keys.forwarded()
    if lines and rb.oom and lines[-1].extend_tokens == rb.oom.tokens:
        with_crash = keys.with_pieces()
        if _misfits(with_crash, lines, same) < _misfits(targets, lines, same):
            targets = with_crash

    for key, p in _pairs(rb, rank, "replayed plan", targets, lines, same):
        rids = [x.rid for x in key.round.pieces] if key.round is not None else None
        if key.round is not None:
            key.round.replays.append(PlanReplay(rank, p.rids, p.extend_tokens, p.where))
        _settle(
            rb,
            key,
            key.same_rids(list(p.rids or [])) and p.extend_tokens == key.new_tokens,
            "PP plan",
            f"{rank} replayed rids={p.rids} extend_tokens={p.extend_tokens} ({p.where}); "
            f"{rb.rank} decided {rids if rids is not None else 'other requests'} with "
            f"{key.new_tokens} tokens",
            f"{rank} replayed the same plan ({p.where}): extend_tokens={p.extend_tokens}",
        )


def _settle(rb: Rebuild, key: Key, agrees: bool, what: str, detail: str, note: str) -> None:
    """A disagreement is a contradiction; an agreement cross-checks the round's pieces that
    were not observed (of a kept round: the others have left)."""
    if not agrees:
        rb.contradictions.append(Contradiction(key.index, what, detail))
        return
    for piece in key.round.pieces if key.round is not None else ():
        if piece.provenance != "observed":
            piece.cross_checked = True
            piece.evidence.append(note)
