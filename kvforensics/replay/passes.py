"""One pass over the rebuilt rounds as they stream by. Each round is re-run under
``prefix`` once (the fidelity check and the whole-log findings share that run), checked
for continuity with the round before, and its traffic gathered for the transfer model;
then only what the verdict, the causes and the forward runs need is kept: the recent
rounds, the rounds with an out-of-memory, the round where each still-unfinished request
was truncated (with the times of the rounds since), and the rounds a fix refuses in."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mypy_extensions import mypyc_attr

from kvforensics.model import Config
from kvforensics.model.profiles import FORK, Profile
from kvforensics.replay.arrivals import Arrivals
from kvforensics.replay.checks import Checks, Known, Pipes, Remote, make_checks
from kvforensics.replay.transfers import Traffic
from kvforensics.replay.whole_log import WholeLogPass
from kvforensics.rounds import Round
from kvforensics.rounds.continuity import Continuity
from kvforensics.rounds.crosscheck import RoundKeys
from kvforensics.rounds.packed import unpack
from kvforensics.rounds.records import LoggedOom
from kvforensics.rounds.stream import finished

#: recent rounds kept (the report's history, the cross-checks' kept rounds)
WINDOW = 5_000


# init=False and the __init__ below: mypyc compiles a hand-written __init__, while the one
# dataclass() writes stays interpreted (one is made for every logged round)
@mypyc_attr(allow_interpreted_subclasses=True)  # copy and pickle make one without __init__
@dataclass(init=False)
class Timed:
    """How many rounds carry a time, the first and the last time, and the last such round."""

    count: int = 0
    first: datetime | None = None
    last: Round | None = None

    def __init__(
        self, count: int = 0, first: datetime | None = None, last: Round | None = None
    ) -> None:
        self.count, self.first, self.last = count, first, last

    def add(self, rnd: Round) -> None:
        if rnd.time is None:
            return
        self.count += 1
        self.first = rnd.time if self.first is None else self.first
        self.last = rnd

    def span(self) -> float:
        if self.count <= 1 or self.last is None or self.last.time is None or self.first is None:
            return 0.0
        return (self.last.time - self.first).total_seconds()

    @classmethod
    def of(cls, rounds: Iterable[Round]) -> Timed:
        t = cls()
        for r in rounds:
            t.add(r)
        return t


class Packed:
    """One byte-range worker's rounds as the join reads them (``replay/ranges.py``): the
    packed rounds (``rounds/packed.py``), the prompt lengths set before each, the
    out-of-memory lines by position, how far to move their numbers; ``want``: the
    numbers of the rounds to keep, found in ``found``."""

    def __init__(
        self,
        rows: list[tuple[Any, ...]],
        sets: list[list[tuple[str, int]]],
        ooms: dict[int, LoggedOom],
        shift: int,
        want: set[int],
    ) -> None:
        assert len(rows) == len(sets), "a prompt-length list for every round"
        self.rows, self.sets, self.ooms, self.shift, self.want = rows, sets, ooms, shift, want
        self.found: dict[int, Round] = {}

    def round_at(self, i: int) -> Round:
        """The ``i``-th round, renumbered, with its out-of-memory line (kept when wanted)."""
        rnd = unpack(self.rows[i], self.shift, self.ooms.get(i))
        if rnd.index in self.want:
            self.found[rnd.index] = rnd
        return rnd


@dataclass
class RoundPass:
    cfg: Config
    seq_lens: dict[str, int]
    window: int | None = WINDOW
    whole: bool = False
    profile: Profile = FORK
    #: a second process to re-run the rounds in (``checks.start``); None: here
    link: Pipes | None = None
    timed: Timed = field(default_factory=Timed)
    logged: int = 0
    last_logged: Round | None = None

    def __post_init__(self) -> None:
        self.known = Known(self.cfg, self.seq_lens)
        self.checks: Checks | Remote = make_checks(self.known, self.profile, self.whole, self.link)
        self.continuity = Continuity(self.cfg.page_size)
        self.traffic = Traffic(self.cfg)
        self.keys = RoundKeys()
        self._recent: deque[Round] = deque(maxlen=self.window)
        #: rid -> (the logged round it was first truncated in, the times since), while
        #: it is unfinished
        self._truncated: dict[str, tuple[Round, Timed]] = {}
        #: the requests first shown since each of those truncations (the arrivals of a
        #: forward run from there)
        self.arrivals = Arrivals()
        self._ooms: list[Round] = []
        #: round index -> how many of the truncations and out-of-memories above it holds
        self._pins: dict[int, int] = {}
        #: the timed rounds since the last logged one (it included)
        self.since_logged = Timed()
        #: round index -> its resumed chunk's prompt length, for the rounds that may be kept
        #: (a finished request leaves ``seq_lens``, so memory stays flat)
        self._lens: dict[int, dict[str, int]] = {}

    @property
    def wholelog(self) -> WholeLogPass | None:
        """The whole-log pass, when it runs in this process (else None)."""
        return getattr(self.checks, "wholelog", None)

    def add(self, rnd: Round) -> None:
        lens = self._lens_of(rnd)
        self.checks.add(rnd, lens)
        self.continuity.add(rnd)
        done = finished(rnd, self.seq_lens)  # read here and by the traffic: found once
        self.traffic.add(rnd, self.seq_lens, done)
        self.keys.add(rnd)
        self.timed.add(rnd)
        for _, since in self._truncated.values():
            since.add(rnd)
        self.arrivals.add(rnd)
        self._keep(rnd, lens)
        if rnd.decisions:
            self.logged += 1
            self.last_logged = rnd
            self.since_logged = Timed()
        self.since_logged.add(rnd)
        for d in rnd.decisions:
            if d.decision == "truncated" and d.rid not in self._truncated:
                self._truncated[d.rid] = (rnd, Timed.of([rnd]))
                self._pins[rnd.index] = self._pins.get(rnd.index, 0) + 1
                self.arrivals.open(d.rid, rnd)
        if rnd.oom is not None:
            self._ooms.append(rnd)
            self._pins[rnd.index] = self._pins.get(rnd.index, 0) + 1
        for rid in done:
            self._forget(rid)
            self.arrivals.close(rid)
            del self.seq_lens[rid]

    def add_packed(self, part: Packed, start: int, end: int) -> None:
        """The rounds ``start`` to ``end`` of a byte-range worker's share (``part``), in
        order, each after the prompt lengths the rebuild set before it; a round of
        ``part.want`` is kept there (the join's refusals). Compiled, so that the join's
        one serial loop runs no interpreted code per round."""
        lens = self.seq_lens
        for i in range(start, end):
            for rid, n in part.sets[i]:
                lens[rid] = n
            self.add(part.round_at(i))

    def _forget(self, rid: str) -> None:
        """``rid`` finished: its truncation round is no longer needed for it."""
        got = self._truncated.pop(rid, None)
        if got is not None:
            index = got[0].index
            self._pins[index] -= 1
            if not self._pins[index]:
                del self._pins[index]

    def late(self, rnd: Round) -> None:
        """A round another rank's lines added after the stream ended (whole-log only)."""
        if self.whole:
            self.checks.add(rnd, self._lens_of(rnd), late=True)
        self._recent.append(rnd)
        self._lens[rnd.index] = self._lens_of(rnd)

    def _lens_of(self, rnd: Round) -> dict[str, int]:
        # A model node at a round takes its queue's lengths from the decisions; only the
        # resumed chunk's comes from ``seq_lens``.
        rids = [p.rid for p in rnd.pieces if p.kind == "resumed"]
        return {r: self.seq_lens[r] for r in rids if r in self.seq_lens}

    def _keep(self, rnd: Round, lens: dict[str, int]) -> None:
        recent = self._recent
        if recent.maxlen is not None and len(recent) == recent.maxlen:
            old = recent[0].index
            if not self._pinned(old):
                self._lens.pop(old, None)
        recent.append(rnd)
        self._lens[rnd.index] = lens

    def _pinned(self, index: int) -> bool:
        if index in self._pins:
            return True
        self.checks.settle(index)  # whether a fix refused in it is known once it is checked
        return self.checks.refused_in(index)

    def truncation(self, rid: str) -> tuple[Round, Timed] | None:
        """The round where ``rid`` was first truncated, and the timed rounds since."""
        return self._truncated.get(rid)

    def kept(self) -> list[Round]:
        """The rounds kept, in index order."""
        self.checks.settle()
        pinned = [r for r, _ in self._truncated.values()] + self._ooms + self.checks.pinned()
        every = {r.index: r for r in pinned} | {r.index: r for r in self._recent}
        return [every[i] for i in sorted(every)]

    def kept_seq_lens(self, kept: list[Round]) -> dict[str, int]:
        """Prompt lengths of the chunks resumed in the rounds kept and of the requests
        unfinished."""
        out: dict[str, int] = {}
        for r in kept:
            out.update(self._lens.get(r.index) or self._lens_of(r))
        out.update(self.seq_lens)
        return out
