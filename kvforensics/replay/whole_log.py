"""The whole log, round by round: every rebuilt round re-run under ``prefix`` from its own
rebuilt state (as the fidelity check does), then read off the model's ledger: admissions
through a gap, the margin each round left, and what a fix would have refused.

Nothing here sizes a piece or checks memory: those numbers are the ledger's fields, so the
adder's arithmetic stays in ``kvforensics.model``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol, TypeVar

from mypy_extensions import mypyc_attr

from kvforensics.causes.gaps import through_gaps, unreserved
from kvforensics.model import POLICIES, OutOfMemory, RunResult, Timing
from kvforensics.model.ledger import Step
from kvforensics.model.policies import AS_RAN
from kvforensics.model.profiles import FORK, Profile
from kvforensics.replay.profile_choice import ProfileChoice
from kvforensics.replay.state import Sizes, node_at
from kvforensics.replay.verdict import first_token_delays
from kvforensics.rounds import Rebuild, Round
from kvforensics.rounds.compact import Spool, pack_time, unpack_time

T = TypeVar("T")

#: the fixes whose refusals are counted, when the model has them
FIXES = ("fixed", "park")
ADMITTED = ("full", "truncated")
#: a forward run to measure a refused request's delay stops here
FORWARD_ROUNDS = 1_000
#: margins kept per node: the lowest of each stretch of rounds (the result stays small)
MARGIN_POINTS = 256


# compiled, a plain class: copy and pickle cannot set a native frozen dataclass's fields
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class GapAdmission:
    """A request admitted after a truncation, in the chunk budget the truncation left,
    while the truncated request's tail was promised to nobody."""

    round: int
    time: str | None
    victim_rid: str
    unreserved_tail: int
    intruder_rid: str
    intruder_compute: int
    intruder_load_back: int
    #: the memory check it passed (rem_total_tokens at that step)
    rem_total_tokens: int | None
    #: the chunk budget left by the truncation
    leftover_chunk_budget: int | None


# compiled, a plain class: copy and pickle cannot set a native frozen dataclass's fields
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class Margin:
    """What a round left (available + evictable after its allocation) minus the tails that
    no one reserved. Negative: the promised tails no longer fit unless memory is freed."""

    round: int
    time: str | None
    left: int
    unreserved_tails: int
    margin: int
    #: the round itself could not allocate (its margin is available minus requested)
    oom: bool = False


# compiled, a plain class: copy and pickle cannot set a native frozen dataclass's fields
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class Refusal:
    """A request the prefix run admitted that a fix refuses in the same round."""

    round: int
    rid: str
    #: how much later its prefill finishes under the fix (None: not within the run)
    delay_s: float | None


# compiled, a plain class: copy and pickle cannot set a native frozen dataclass's fields
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class WholeLog:
    """The whole-log findings of one node."""

    gap_admissions: tuple[GapAdmission, ...]
    #: the lowest margin of each stretch of rounds, in round order (the tightest among them)
    margins: tuple[Margin, ...]
    refused: dict[str, tuple[Refusal, ...]]
    rounds_rerun: int
    notes: tuple[str, ...] = ()

    def tightest(self) -> Margin | None:
        """The least margin; the earliest round among equals."""
        return min(self.margins, key=lambda m: (m.margin, m.round), default=None)

    def as_dict(self) -> dict[str, Any]:
        tight = self.tightest()
        return {
            "gap_admissions": [asdict(g) for g in self.gap_admissions],
            "tightest_margin": asdict(tight) if tight else None,
            "refused": {
                p: {"requests": len(rs), "delays": [asdict(r) for r in rs]}
                for p, rs in self.refused.items()
            },
            "rounds_rerun": self.rounds_rerun,
            "notes": list(self.notes),
        }


class Replayed(Protocol):
    """What the findings read of a replay (``replay.ReplayResult``)."""

    @property
    def rebuild(self) -> Rebuild: ...

    @property
    def results(self) -> dict[str, RunResult]: ...

    @property
    def start_round(self) -> int | None: ...

    @property
    def profile(self) -> ProfileChoice | None: ...

    @property
    def whole_log(self) -> WholeLog | None: ...


@mypyc_attr(allow_interpreted_subclasses=True)  # copy and pickle make one without __init__
class Rerun:
    """One round re-run under one policy: the adder's steps and the outcome.

    ``left``: what the round's allocation left (available + evictable after it), None
    where nothing was allocated (no piece, or the round ran out of memory)."""

    __slots__ = ("left", "oom", "steps")

    def __init__(self, steps: list[Step], oom: OutOfMemory | None, left: int | None) -> None:
        self.steps, self.oom, self.left = steps, oom, left

    def adder(self) -> list[Step]:
        """The adder's steps (the only steps a re-run keeps)."""
        return self.steps

    def admitted(self) -> list[str]:
        return [_always(r.rid) for r in self.adder() if r.decision in ADMITTED]


def _always(value: T | None) -> T:
    """A ledger field that every step of the kind read holds (an adder step's request, an
    admitted piece's start and end, an allocation's baseline after it). ``Step`` makes
    every field optional because no one kind of step has them all."""
    assert value is not None
    return value


def rerun(known: Sizes, rnd: Round, policy: str, profile: Profile = FORK) -> Rerun:
    """``known``: the configuration and prompt lengths (a ``Rebuild`` or a stream's).

    No ledger: every finding reads the adder's own steps, and what the allocation left is
    the pool's baseline after it (what its ledger rows would say), so a round's re-run
    makes no allocation rows it would drop at once."""
    node = node_at(known, rnd, policy, profile=profile, ops=False, record=False)
    batch = node.batch()
    left = node.pool.baseline() if batch.pieces and batch.oom is None else None
    return Rerun(batch.adder.steps, batch.oom, left)


def is_replayable(rnd: Round) -> bool:
    """A rebuilt baseline and something to run (logged or inferred)."""
    has_base = rnd.baseline is not None and rnd.baseline.value is not None
    return has_base and bool(rnd.decisions or rnd.pieces)


def gap_admissions(run: Rerun, rnd: Round) -> list[GapAdmission]:
    """Every admission after an unreserved truncation of the same round that left budget
    (``causes.gaps``)."""
    return [
        GapAdmission(
            round=rnd.index,
            time=_time(rnd),
            victim_rid=_always(victim.rid),
            unreserved_tail=unreserved(victim),
            intruder_rid=_always(row.rid),
            intruder_compute=_always(row.end) - _always(row.start),
            intruder_load_back=row.load_back or 0,
            rem_total_tokens=row.rem_total_tokens,
            leftover_chunk_budget=victim.rem_chunk_after,
        )
        for victim, row in through_gaps(run.adder())
    ]


def margin(run: Rerun, rnd: Round) -> tuple[int, int, bool] | None:
    """(what the round left, the tails it promised to nobody, whether it ran out)."""
    tails = sum(unreserved(r) for r in run.adder())
    if run.oom is not None:
        return run.oom.available - run.oom.tokens, tails, True
    if run.left is None:
        return None
    return run.left, tails, False


def _fix_may_refuse(run: Rerun) -> bool:
    """A fix's hooks act after a truncation or on a forced resume; before that its steps
    are the prefix run's. So it can refuse only a request the prefix run admits after an
    unreserved truncation, or anything once a resume was forced: elsewhere it is not
    re-run."""
    cut = False
    for r in run.adder():
        if r.forced:
            return True
        if cut and r.decision in ADMITTED:
            return True
        cut = cut or bool(unreserved(r))
    return False


class Margins:
    """Every round's margin, spooled (a few dozen bytes a round, out of memory once there
    are many): the few the findings show are picked in one pass at the end."""

    def __init__(self) -> None:
        #: round, time, what it left, the tails it promised to nobody, whether it ran out
        self.rows = Spool("qqqqb")

    def add(self, rnd: Round, left: int, tails: int, oom: bool) -> None:
        self.rows.push(rnd.index, pack_time(rnd.time), left, tails, oom)

    @staticmethod
    def _margin(row: tuple[Any, ...]) -> Margin:
        index, t, left, tails, oom = row
        at = unpack_time(t)
        when = at.isoformat(sep=" ") if at is not None else None
        return Margin(index, when, left, tails, left - tails, oom=bool(oom))

    def lowest_per_stretch(self, points: int = MARGIN_POINTS) -> tuple[Margin, ...]:
        """At most ``points`` margins: the lowest of each run of consecutive rounds (the
        first of the lowest), so the tightest one is always kept."""
        n = len(self.rows)
        size = 1 if n <= points else -(-n // points)
        picks: list[tuple[Any, ...]] = []
        best: tuple[Any, ...] | None = None
        low: tuple[int, int] = (0, 0)  # set by the first row
        for i, row in enumerate(self.rows.rows()):
            key = (row[2] - row[3], row[0])
            if i % size == 0:
                if best is not None:
                    picks.append(best)
                best, low = row, key
            elif key < low:
                best, low = row, key
        if best is not None:
            picks.append(best)
        return tuple(self._margin(row) for row in picks)


def fix_policies() -> list[str]:
    """The fixes whose refusals are counted: those of ``FIXES`` the model has."""
    return [p for p in FIXES if p in POLICIES]


# compiled, a plain class: copy and pickle cannot set a native frozen dataclass's fields
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class Findings:
    """What the pass over the rounds found, before the refused requests' delays."""

    gaps: tuple[GapAdmission, ...]
    margins: tuple[Margin, ...]
    rerun: int


class WholeLogPass:
    """Fed the rounds in order; ``finish`` gives the findings once the replay has run.

    Keeps the gap admissions, the margins (compact) and the rounds a fix refuses a
    request in (their delays need a forward run from them at the end)."""

    def __init__(self, known: Sizes, profile: Profile = FORK) -> None:
        self.known, self.profile = known, profile
        self.fixes = fix_policies()
        self.gaps: list[GapAdmission] = []
        self.margins = Margins()
        self.rerun = 0
        self.refused: dict[str, list[tuple[Round, str]]] = {p: [] for p in self.fixes}
        self.refused_rounds: set[int] = set()

    def add(self, rnd: Round) -> Rerun | None:
        """One round; its ``prefix`` re-run (None for a round with nothing to run)."""
        if not is_replayable(rnd):
            return None
        self.rerun += 1
        run = rerun(self.known, rnd, AS_RAN, self.profile)
        self.gaps.extend(gap_admissions(run, rnd))
        m = margin(run, rnd)
        if m is not None:
            self.margins.add(rnd, *m)
        if _fix_may_refuse(run):
            for policy in self.fixes:
                kept = set(rerun(self.known, rnd, policy, self.profile).admitted())
                refused = [(rnd, r) for r in run.admitted() if r not in kept]
                self.refused[policy].extend(refused)
                if refused:
                    self.refused_rounds.add(rnd.index)
        return run

    def pinned(self) -> list[Round]:
        """The rounds the findings still need."""
        return [rnd for refused in self.refused.values() for rnd, _ in refused]

    def findings(self) -> Findings:
        return Findings(tuple(self.gaps), self.margins.lowest_per_stretch(), self.rerun)

    def finish(self, rr: Replayed, per_round: float) -> WholeLog:
        """``rr``: the ``replay.ReplayResult``; its start-round runs give the delays there."""
        return complete(rr, self.findings(), self.refused, per_round)


def complete(
    rr: Replayed, found: Findings, refused: dict[str, list[tuple[Round, str]]], per_round: float
) -> WholeLog:
    """The findings with each refused request's first-token delay (``rr``: the replay;
    ``refused``: per fix, the rounds and requests it refused)."""
    notes: list[str] = []
    delays = {p: _delays(rr, p, refused[p], notes, per_round) for p in refused}
    return WholeLog(found.gaps, found.margins, delays, found.rerun, tuple(dict.fromkeys(notes)))


def whole_log(rr: Replayed) -> WholeLog:
    """The findings over every round ``rr`` (a ``replay.ReplayResult``) holds."""
    if rr.whole_log is not None:  # gathered in the replay's own pass
        return rr.whole_log
    wl = WholeLogPass(rr.rebuild, rr.profile.profile if rr.profile else FORK)
    for rnd in rr.rebuild.rounds:
        wl.add(rnd)
    return wl.finish(rr, round_seconds(rr.rebuild))


def _delays(
    rr: Replayed, policy: str, refused: list[tuple[Round, str]], notes: list[str], per_round: float
) -> tuple[Refusal, ...]:
    """First-token delay of each refused request: at the replay's start round from its own
    runs (with its transfer model); elsewhere from both policies run forward from the
    round's rebuilt state."""
    if not refused:
        return ()
    out: list[Refusal] = []
    by_round: dict[int, tuple[Round, list[str]]] = {}
    for rnd, rid in refused:
        by_round.setdefault(rnd.index, (rnd, []))[1].append(rid)
    for index, (rnd, rids) in by_round.items():
        base, other = _runs(rr, rnd, policy, notes, per_round)
        table = {d.rid: d.delay_s for d in first_token_delays(base, other)}
        out.extend(Refusal(index, rid, table.get(rid)) for rid in rids)
    return tuple(out)


def _runs(
    rr: Replayed, rnd: Round, policy: str, notes: list[str], per_round: float
) -> tuple[RunResult, RunResult]:
    if rnd.index == rr.start_round and AS_RAN in rr.results and policy in rr.results:
        return rr.results[AS_RAN], rr.results[policy]
    notes.append(
        f"first-token delays under {policy} outside the replay's own runs: prefix and "
        f"{policy} run forward from that round's rebuilt state, a round lasting {per_round:.2f} s "
        "(derived: the log's span over its rounds), finished requests' memory free at once, "
        "the memory held outside the round's queue held throughout (assumed)"
    )
    timing = Timing(round_overhead_s=per_round)
    base, other = (
        node_at(rr.rebuild, rnd, p, timing=timing).run(max_rounds=FORWARD_ROUNDS)
        for p in (AS_RAN, policy)
    )
    return base, other


def lowest_per_stretch(margins: list[Margin], points: int = MARGIN_POINTS) -> tuple[Margin, ...]:
    """At most ``points`` margins: the lowest of each run of consecutive rounds, so the
    tightest one is always kept."""
    if len(margins) <= points:
        return tuple(margins)
    size = -(-len(margins) // points)
    return tuple(
        min(margins[i : i + size], key=lambda m: (m.margin, m.round))
        for i in range(0, len(margins), size)
    )


def round_seconds(rb: Rebuild) -> float:
    timed = [r.time for r in rb.rounds if r.time is not None]
    if len(timed) < 2 or timed[-1] <= timed[0]:
        return 1.0
    return (timed[-1] - timed[0]).total_seconds() / (len(timed) - 1)


def _time(rnd: Round) -> str | None:
    return rnd.time.isoformat(sep=" ") if rnd.time is not None else None
