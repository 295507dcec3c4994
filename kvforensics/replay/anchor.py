"""Hold the ``prefix`` forward run to every observed number between its start and the
out-of-memory.

A forward run starts from the evidence of one round and then follows the model's rules.
The model does not know what happens outside the adder: KV transfers that end, memory
taken by something else. The logs do show its effect, in each logged round's baseline and
in the out-of-memory line's availability. Where the model's pool differs from such an
observation, the difference is an exogenous event: memory taken (outside allocation) or
given back (a transfer ended) between the two observations that bound it. Each one is
sized so that the run meets the observation, placed in every round where the run still
meets the evidence between (the pieces that AttentionStore writes and batch lines pin
down), and then replayed as a fact under every policy.

NOTE: within the anchored window no transfer ends on the model's clock (the node's
``hold_until``): memory comes back only where an observation shows it. That is what makes
the window's events independent of any assumed transfer time.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from kvforensics.model import OutOfMemory, PrefillNode, RoundRecord
from kvforensics.model.decisions import ADMITTED
from kvforensics.rounds import Rebuild, Round
from kvforensics.rounds.provenance import DERIVED, OBSERVED

#: placements tried for one event: every round between its two observations up to this
#: many, else this many spread evenly (the work per event stays bounded on any window)
MAX_PLACEMENTS = 24
#: sizes tried per placement: a size changes the pieces, the pieces the size
MAX_FITS = 32


@dataclass(frozen=True, slots=True)
class Anchor:
    """An observed number the ``prefix`` run must meet: a round's baseline when its adder
    started (``baseline``), or the availability in the out-of-memory line (``oom``)."""

    round: int
    kind: str  # baseline | oom | piece (a round's pieces: ``where`` says how they missed)
    value: int
    where: str
    #: for ``oom``: the tokens the line asked for, and the request it is pinned on
    tokens: int | None = None
    rid: str | None = None
    #: for ``baseline``: the least the first check's prefix lock took before its line was
    #: printed, where the rebuild found the evidence of it (``Round.first_lock``)
    lock: int = 0
    #: for ``baseline``: the first check's device prefix (its line's ``prefix_len``): the
    #: most its lock can take out of the evictable cache before the line is printed
    prefix: int = 0
    #: for ``baseline``: the device prefixes of the requests the round before admitted
    #: after its first check (each lock held while its request runs)
    held_prefixes: tuple[int, ...] = ()

    def says(self) -> str:
        if self.kind == "piece":
            return f"round {self.round}'s pieces as the logs bound them"
        if self.kind == "oom":
            return f"the out-of-memory line's {self.value} available in round {self.round}"
        return f"round {self.round}'s logged baseline {self.value}"


@dataclass(frozen=True, slots=True)
class Shift:
    """Memory taken (``tokens`` > 0) or given back (< 0) outside the adder before
    ``round``, found between the observations of rounds ``after`` and ``anchor.round``.
    ``placements``: every (round, tokens) that meets all the evidence, latest first."""

    round: int
    tokens: int
    after: int
    anchor: Anchor
    placements: tuple[tuple[int, int], ...]
    #: for memory given back: the most that meets the same observation (the logs bound a
    #: return only from below where a piece the chunk budget caps or an interval absorbs
    #: more); ``tokens`` where nothing more does, 0 for a take
    most_back: int = 0

    @property
    def saturated(self) -> bool:
        """A take the logs show leaving nothing: its size is only a lower bound."""
        return self.tokens > 0 and self.anchor.kind != "piece" and self.anchor.value == 0

    @property
    def lock(self) -> bool:
        """A fall a prefix lock explains, of cache the run did not know of (come onto the
        device since its start): the first check's own, no larger than the device prefix
        its line shows and placed in that round (the line is printed after the lock); or
        exactly the device prefix of a request the round before admitted after its first
        check (the lock is held while the request runs)."""
        a = self.anchor
        if a.kind != "baseline" or self.tokens <= 0:
            return False
        # the round before's later checks: a fall exactly one admitted request's prefix
        return self.tokens in a.held_prefixes or (
            self.tokens <= a.prefix and any(r == a.round for r, _ in self.placements)
        )  # fmt: skip

    @property
    def rounds(self) -> tuple[int, int]:
        """The earliest and latest round it may have happened before."""
        rs = [r for r, _ in self.placements]
        return min(rs), max(rs)

    def sentence(self) -> str:
        if self.lock and self.tokens in self.anchor.held_prefixes:
            return (
                f"{self.tokens} slots of cache locked before round {self.anchor.round} "
                f"(derived: {self.anchor.says()} ({self.anchor.where}) against what the "
                f"rounds since round {self.after} leave; a request admitted in the round "
                f"before with a device prefix of {self.tokens} tokens holds its lock, cache "
                "the run did not hold)"
            )
        if self.lock:
            return (
                f"{self.tokens} slots of cache locked at round {self.anchor.round}'s first "
                f"check (derived: {self.anchor.says()} ({self.anchor.where}) against what the "
                f"rounds since round {self.after} leave; its request's device prefix of "
                f"{self.anchor.prefix} tokens, locked before the line is printed, was cache "
                "the run did not hold)"
            )
        lo, hi = self.rounds
        where = f"before round {lo}" if lo == hi else f"before one of rounds {lo}..{hi}"
        sizes = sorted({t for _, t in self.placements})
        size = f"{abs(sizes[0])}" if len(sizes) == 1 else f"{abs(sizes[0])}-{abs(sizes[-1])}"
        what = "taken outside the adder" if self.tokens > 0 else "given back (a KV transfer ended)"
        return (
            f"{size} slots {what} {where} (derived: {self.anchor.says()} ({self.anchor.where}) "
            f"against what the rounds since round {self.after} leave)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "tokens": self.tokens,
            "after_round": self.after,
            "observation": self.anchor.where,
            "placements": [list(p) for p in self.placements],
            **({"lock": True} if self.lock else {}),
        }


@dataclass(frozen=True, slots=True)
class Unmet:
    """An observation the ``prefix`` run cannot meet with one event before it, and why."""

    anchor: Anchor
    why: str

    def sentence(self) -> str:
        return f"{self.anchor.says()} ({self.anchor.where}) cannot be met: {self.why}"


@dataclass(frozen=True, slots=True)
class Anchoring:
    """The exogenous events the observations require, and what could not be met."""

    shifts: tuple[Shift, ...]
    unmet: tuple[Unmet, ...]
    #: the last round an observation holds the run to (transfers end on the clock after it)
    last_round: int
    #: the out-of-memory round, where its line shows 0 available and the run met it: a
    #: take just before it is hidden by that 0 (``schedule``'s ``swap``)
    empty_oom: int | None = None

    def schedule(
        self, base: dict[int, int], pick: int = 0, most: int = 0, offset: int = 0,
        swap: bool = False,
    ) -> dict[int, int]:  # fmt: skip
        """``base`` plus every shift at its ``pick``-th placement (0: the latest; -1: the
        earliest; a shift with fewer placements takes its last). ``most``: a take that left
        nothing available is that many slots instead (it may have asked for more than
        there was: the logs show only what it got). ``offset``: every shift that many
        rounds later (< 0: earlier), never before the round after the start: an event
        happened at a time, and under another policy that time may fall in another round.
        ``swap``: every return at the most its observation allows, and what that adds
        taken outside the adder just before the out-of-memory round (``can_swap``)."""
        out = dict(base)
        extra = 0
        for s in self.shifts:
            r, t = s.placements[min(pick, len(s.placements) - 1) if pick >= 0 else pick]
            r = max(r + offset, s.after + 1) if offset else r
            if swap and s.most_back < t < 0:
                extra += t - s.most_back
                t = s.most_back
            out[r] = out.get(r, 0) + (max(t, most) if most and s.saturated else t)
        if extra and self.empty_oom is not None:
            out[self.empty_oom] = out.get(self.empty_oom, 0) + extra
        return out

    def can_swap(self) -> bool:
        """Whether the observations are met as well by more memory back and something
        outside the adder taking the difference before the crash round: a return the logs
        bound only from below, and an out-of-memory line whose 0 available hides a take."""
        return self.empty_oom is not None and any(s.most_back < s.tokens < 0 for s in self.shifts)

    def saturated(self) -> bool:
        return any(s.saturated for s in self.shifts)

    def variants(self) -> int:
        """How many placements the most uncertain shift has."""
        return max((len(s.placements) for s in self.shifts), default=1)


def anchors(rb: Rebuild, start: Round) -> list[Anchor]:
    """The observations after ``start`` up to the out-of-memory, in order: each logged
    round's baseline, then the out-of-memory line's availability."""
    o = rb.oom
    if o is None or o.round is None or o.available is None:
        return []
    out = []
    held: tuple[int, ...] = ()  # the device prefixes the last logged round admitted
    for rnd in rb.rounds:
        if start.index < rnd.index <= o.round and rnd.observed and rnd.baseline is not None:
            b = rnd.baseline
            if b.provenance == OBSERVED and b.value is not None:
                lock = rnd.first_lock.value if rnd.first_lock and rnd.first_lock.value else 0
                prefix = rnd.decisions[0].prefix_len if rnd.decisions else 0
                out.append(Anchor(rnd.index, "baseline", b.value, ", ".join(b.evidence),
                                  lock=lock, prefix=prefix, held_prefixes=held))  # fmt: skip
        if rnd.decisions and rnd.index > start.index:  # the start round's the run holds
            held = tuple(d.prefix_len for d in rnd.decisions[1:]
                         if d.prefix_len and d.decision in ADMITTED)  # fmt: skip
    out.append(Anchor(o.round, "oom", o.available, o.where or "", o.tokens, o.rid))
    return out


class Miss(NamedTuple):
    """A round whose pieces in the run disagree with the logs: why, and how many slots
    more memory (< 0: fewer) the run would have needed to agree (0: cannot tell)."""

    why: str
    need: int


#: what a run's round should have shown: ``None``, or how it missed
Check = Callable[[int, list[tuple[str, int, int]]], Miss | None]


def evidence_check(rb: Rebuild) -> Check:
    """A check of one round's pieces (the model's) against what the logs pin down of that
    round: pieces observed or derived, a piece end an AttentionStore write bounds, and the
    batch line's ``#new-token``."""
    by_index = {r.index: r for r in rb.rounds}

    def check(index: int, pieces: list[tuple[str, int, int]]) -> Miss | None:
        rnd = by_index.get(index)
        if rnd is None:
            return None
        got = {rid: (s, e) for rid, s, e in pieces}
        for p in rnd.pieces:
            m = got.get(p.rid)
            if p.provenance in (OBSERVED, DERIVED) and m != (p.start, p.end):
                return Miss(f"round {index}: {p.rid}'s piece is [{p.start}, {p.end}) in the "
                            f"logs, {_piece(m)} in the run", _short(m, p.end, p.end))  # fmt: skip
            if p.interval_end and (m is None or not p.interval_end[0] <= m[1] <= p.interval_end[1]):
                lo, hi = p.interval_end
                return Miss(f"round {index}: {p.rid}'s piece ends in [{lo}, {hi}] "
                            f"(AttentionStore), {_piece(m)} in the run", _short(m, lo, hi))  # fmt: skip
        new = rnd.batch.new_token if rnd.batch is not None else None
        ran = sum(e - s for _, s, e in pieces)
        if new is not None and new != ran:
            return Miss(f"round {index}: #new-token {new} in the batch line, {ran} in the run",
                        new - ran)  # fmt: skip
        return None

    return check


def _piece(m: tuple[int, int] | None) -> str:
    return "none" if m is None else f"[{m[0]}, {m[1]})"


def _short(m: tuple[int, int] | None, lo: int, hi: int) -> int:
    """Slots the run's piece end is short of [lo, hi] (< 0: past it; 0: no piece)."""
    if m is None:
        return 0
    return lo - m[1] if m[1] < lo else hi - m[1] if m[1] > hi else 0


@dataclass(slots=True)
class _Probe:
    node: PrefillNode | None
    value: int | None
    why: str | None
    oom: OutOfMemory | None = None
    #: slots more memory an earlier round needed to meet the evidence (``Miss.need``)
    need: int = 0
    #: the round whose pieces missed the evidence
    at: int | None = None


def _probe(base: PrefillNode, extra: dict[int, int], anchor: Anchor, check: Check) -> _Probe:
    """Run a copy of ``base`` with ``extra`` events to ``anchor`` and read what it
    observes there."""
    node = copy.deepcopy(base)
    for r, t in extra.items():
        node.outside[r] = node.outside.get(r, 0) + t
    last = anchor.round + (anchor.kind == "piece")  # a piece mark is read after its round
    while node.round < last:
        out = node.step()
        if out is None:
            return _Probe(None, None, f"the run has nothing left to do by round {node.round}")
        if isinstance(out, OutOfMemory):
            # NOTE: the logs show every round up to the anchor's ran: running out in an
            # earlier one is that round missing the evidence (memory came back before it)
            early = out.round < anchor.round
            why = (f"round {out.round} ran in the logs, and the run runs out of memory in it "
                   if early else f"the run runs out of memory in round {out.round} first ") + (
                   f"({out.tokens} tokens, {out.available} available)")  # fmt: skip
            return _Probe(None, None, why, out, need=out.tokens - out.available if early else 0,
                          at=out.round if early else None)  # fmt: skip
        miss = check(out.round, out.pieces)
        if miss is not None:
            return _Probe(None, None, miss.why, need=miss.need, at=out.round)
    if anchor.kind == "piece":
        return _Probe(node, anchor.value, None)
    node.prepare()
    if anchor.kind == "baseline":
        return _Probe(node, _first_check_baseline(node, anchor.lock), None)
    batch = node.batch()
    o = batch.oom
    if o is None:
        return _Probe(node, batch.available, "the run allocates the round without running out")
    if (o.tokens, o.rid) != (anchor.tokens, anchor.rid):
        return _Probe(node, o.available, f"the run runs out on {o.rid} asking {o.tokens} tokens", o)
    return _Probe(node, o.available, None, o)


def _first_check_baseline(node: PrefillNode, least_lock: int) -> int:
    """The baseline the round's first ``add_one_req`` line would print: the round's, less
    that request's prefix lock, which the logged line shows taken. The lock is the run's
    own (a dry run of the round on a copy: ``node`` itself has not run it), or at least
    ``least_lock`` where the logs show one the run does not hold (a prefix that came onto
    the device since the start round, which the run cannot know of)."""
    pre = node.pool.baseline()
    trial = copy.deepcopy(node)
    steps = trial.batch().adder.steps
    first = next(
        (s.baseline for s in steps if s.call == "add_one_req" and s.baseline is not None), None
    )
    own = pre - first if first is not None else 0
    return pre - max(own, least_lock)


def _step(p: _Probe, anchor: Anchor, page: int) -> int | None:
    """The next correction of an event's size (> 0: more taken) from what a try missed."""
    if p.value is not None:
        return p.value - anchor.value
    if p.oom is not None:  # ran out before the anchor: more memory was there
        return -_ceil(p.oom.tokens - p.oom.available, page)
    if p.need:  # a piece more memory would have made longer (or less, shorter)
        return -_ceil(p.need, page) if p.need > 0 else _ceil(-p.need, page)
    return None


def _ceil(n: int, page: int) -> int:
    return -(-n // page) * page


def _placements(after: int, upto: int) -> list[int]:
    """Rounds an event between the observations of ``after`` and ``upto`` may precede,
    latest first, at most ``MAX_PLACEMENTS``."""
    rounds = list(range(upto, after, -1))
    if len(rounds) <= MAX_PLACEMENTS:
        return rounds
    step = (len(rounds) - 1) / (MAX_PLACEMENTS - 1)
    return sorted({rounds[round(i * step)] for i in range(MAX_PLACEMENTS)}, reverse=True)


def _fit(
    base: PrefillNode, at: int, guess: int, anchor: Anchor, check: Check, page: int
) -> tuple[int, _Probe] | None:
    """The size of one event before round ``at`` that makes the run meet ``anchor``, or
    None. Each try re-runs; what it missed corrects the size (the pieces move with it).
    A correction that moves nothing (a piece the chunk budget caps) doubles; once one try
    took too little and another too much, the size is bisected between them."""
    tokens, low, high, last, grow = guess, None, None, None, 1
    for _ in range(MAX_FITS):
        p = _probe(base, {at: tokens}, anchor, check)
        if p.value == anchor.value and p.why is None:
            return _least(base, at, tokens, low if tokens > 0 else high, p, anchor, check, page)
        step = _step(p, anchor, page)
        if not step:
            return None
        if step > 0:
            low = tokens if low is None else max(low, tokens)
        else:
            high = tokens if high is None else min(high, tokens)
        if low is not None and high is not None:
            if high - low <= page:
                return None
            nxt = tokens + step
            tokens = nxt if low < nxt < high else low + (high - low) // 2 // page * page
        else:
            grow = grow * 2 if step == last else 1
            tokens, last = tokens + step * grow, step
    return None


def _least(base: PrefillNode, at: int, tokens: int, short: int | None, p: _Probe,
           anchor: Anchor, check: Check, page: int) -> tuple[int, _Probe]:  # fmt: skip
    """The smallest event that still meets ``anchor``, once one that does is known
    (``tokens``: > 0 taken, < 0 given back) and one on the same side that is too small
    (``short``; None: only no event at all is known to miss, and it did): an
    AttentionStore interval, a piece the chunk budget caps or a 0 available admits a
    range, and the logs show no more than its lower end."""
    sign, size = (1 if tokens > 0 else -1), abs(tokens)
    fail = abs(short) if short is not None and short * tokens > 0 else 0
    while size - fail > page:
        mid = fail + (size - fail) // 2 // page * page
        q = _probe(base, {at: sign * mid}, anchor, check)
        if q.value == anchor.value and q.why is None:
            size, p = mid, q
        else:
            fail = mid
    return sign * size, p


def anchor_run(
    node: PrefillNode, marks: list[Anchor], check: Check, *, start: int, page: int
) -> Anchoring:
    """Run ``node`` (``prefix``, at the start of round ``start``) through every anchor,
    finding the events each one needs. A round whose pieces miss the evidence before an
    anchor becomes an anchor of its own (each moves ``after`` on: the walk is bounded by
    the window's rounds). ``node`` is consumed."""
    shifts: list[Shift] = []
    unmet: list[Unmet] = []
    after = start
    # the start round itself is the evidence the node was built from
    out = node.step() if marks else None
    if marks and not isinstance(out, RoundRecord):
        return Anchoring((), tuple(Unmet(m, "the start round does not run") for m in marks), start)
    pending = list(marks)
    run: PrefillNode | None = node
    while pending and run is not None:
        mark = pending[0]
        p = _probe(run, {}, mark, check)
        if p.why is None and p.value == mark.value:
            run, after = _advance(p.node, mark), mark.round
            pending.pop(0)
            continue
        if p.at is not None and p.at < mark.round + (mark.kind == "piece") and mark.kind != "piece":
            pending.insert(0, Anchor(p.at, "piece", 0, p.why or ""))
            continue
        found = list(_consistent(run, after, mark, _step(p, mark, page) or 0, check, page))
        pending.pop(0)
        if not found:
            unmet.append(Unmet(mark, p.why or f"the run has {p.value} there, and no single event "
                               f"after round {after} makes every observation hold"))  # fmt: skip
            run, after = _advance(p.node, mark), mark.round
            continue
        (r, t, probe), *_ = found
        back = _most_back(run, r, t, mark, check, page) if t < 0 else 0
        shifts.append(Shift(r, t, after, mark, tuple((fr, ft) for fr, ft, _ in found), back))
        run, after = _advance(probe.node, mark), mark.round
    unmet.extend(Unmet(m, f"the run stops in round {after}") for m in pending)
    last = marks[-1] if marks else None
    empty = (
        last.round if last is not None and last.kind == "oom" and last.value == 0
        and not any(u.anchor is last for u in unmet) else None
    )  # fmt: skip
    return Anchoring(tuple(shifts), tuple(unmet), after, empty)


def _most_back(
    base: PrefillNode, at: int, tokens: int, anchor: Anchor, check: Check, page: int
) -> int:
    """The largest return before round ``at`` that still meets ``anchor`` (``tokens`` < 0
    is the least that does): up to all the KV still in transfer, halving between."""
    held = sum(base.pool.held.get(t.rid, 0) for t in base.transfers())
    meets, fails = -tokens, base.cfg.floor_page(held) + page
    if fails - meets <= page:
        return tokens
    q = _probe(base, {at: -(fails - page)}, anchor, check)
    if q.value == anchor.value and q.why is None:
        return -(fails - page)
    while fails - meets > page:
        # NOTE: at least a page a step (the sizes found need not be whole pages)
        mid = meets + ((fails - meets) // 2 // page * page or page)
        q = _probe(base, {at: -mid}, anchor, check)
        if q.value == anchor.value and q.why is None:
            meets = mid
        else:
            fails = mid
    return -meets


def _consistent(
    base: PrefillNode, after: int, mark: Anchor, guess: int, check: Check, page: int
) -> Iterator[tuple[int, int, _Probe]]:
    """Every placement (latest first) and size that meets ``mark``; for a round's pieces
    the latest only (they are many, and close to the event)."""
    for at in _placements(after, mark.round):
        got = _fit(base, at, guess, mark, check, page)
        if got is not None:
            yield at, got[0], got[1]
            if mark.kind == "piece":
                return


def _advance(node: PrefillNode | None, mark: Anchor) -> PrefillNode | None:
    """The node past an anchored round (a baseline's round runs; an out-of-memory ends; a
    piece mark's round has run already)."""
    if node is None or mark.kind == "oom":
        return None
    if mark.kind == "piece":
        return node
    out = node.step()
    return None if out is None or isinstance(out, OutOfMemory) else node


def freed_against(node: PrefillNode, mark: Anchor) -> int:
    """How much more memory ``node`` (past its start round, its transfers on the clock)
    has at ``mark`` than the observation: what an assumed transfer time frees there that
    the logs show was not free (0 when it frees nothing more, or the run does not get
    there)."""
    p = _probe(node, {}, mark, lambda _i, _p: None)
    if p.value is not None:
        return max(0, p.value - mark.value)
    # the run does not get there (the memory let the crashing request finish first): what
    # the transfers ending by then hand back is what the assumption adds
    until = node.now + (mark.round - node.round) * node.timing.round_overhead_s
    return sum(node.pool.held.get(t.rid, 0) for t in node.transfers() if t.done_at <= until)
