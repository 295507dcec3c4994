"""The replay's stages, each a value built once: the options it is given
(``ReplayOptions``), the rounds rebuilt and re-run under ``prefix`` (``Rebuilt``), checked
against the continuity of the baseline (``Checked``), every policy run forward from the
start round (``Runs``), the findings over them (``Findings``); ``ReplayResult`` is
assembled from them at the end (``assemble``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from kvforensics.causes import Cause
from kvforensics.causes.oom import OomFigures
from kvforensics.logs import ParseSummary
from kvforensics.model import RunResult
from kvforensics.model.policies import AS_RAN
from kvforensics.replay.anchor import Anchoring
from kvforensics.replay.costs import CostReading
from kvforensics.replay.fidelity import Fidelity
from kvforensics.replay.forward import NodeBuilder, TransferEstimate
from kvforensics.replay.holds import HoldsFor
from kvforensics.replay.passes import WINDOW, RoundPass
from kvforensics.replay.profile_choice import ProfileChoice
from kvforensics.replay.verdict import first_token_delays
from kvforensics.replay.whole_log import WholeLog
from kvforensics.rounds import Rebuild
from kvforensics.rounds.drop import Drop
from kvforensics.rounds.stream import Narrow

EXIT_OK, EXIT_INPUT, EXIT_MISMATCH, EXIT_NOT_REPRODUCED = 0, 2, 3, 4


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """How logs are replayed (``replay.replay_logs``).

    ``policies``: the policies run forward besides ``prefix``; ``overrides``, ``rank``,
    ``formats``, ``progress``: how the logs are read (sizes the log lacks, the deciding
    rank, extra format catalogues, the reader's progress); ``transfer_seconds``: the KV
    transfer time (default: inferred from the log); ``narrow``: only the rounds within
    ``--since``/``--until`` are checked and replayed (reading stops after ``--until``);
    ``stream``: one pass in batches that keeps only what the verdict, the causes and the
    forward runs need (``window`` recent rounds and the pinned ones; the result's
    ``events`` then holds the other ranks' and startup lines only); otherwise every event
    and round is kept (what ``report`` writes out); ``whole_log``: gather the whole-log
    findings (``whole_log.WholeLog``) in the same pass; ``profile``: the model profile's
    name (default: the one the log's lines tell, else the fork's); ``jobs``: 2 re-runs the
    rounds of a streamed replay in a second process as they are rebuilt (the same result;
    default: 2 for large logs where there are two CPUs, ``checks.default_jobs``), 1 keeps
    everything in this one; on one plain log, 2 or more given split it over that many
    workers by byte ranges (``ranges``; the same result) on ``engine`` (local processes or
    Ray), else (and by default) the second process; ``costs``: re-run every policy under
    each other transfer time the log supports (``costs.cost_readings``; what ``report``
    writes)."""

    policies: Sequence[str] = ()
    overrides: Mapping[str, int | None] = field(default_factory=dict)
    transfer_seconds: float | None = None
    rank: str | None = None
    progress: bool = False
    formats: Sequence[Path] | None = None
    narrow: Narrow = field(default_factory=Narrow)
    stream: bool = False
    whole_log: bool = False
    window: int = WINDOW
    profile: str | None = None
    jobs: int | None = None
    engine: str = "local"
    costs: bool = False

    def __post_init__(self) -> None:  # the sequences given as lists, kept as tuples
        object.__setattr__(self, "policies", tuple(self.policies))
        if self.formats is not None:
            object.__setattr__(self, "formats", tuple(self.formats))


@dataclass(frozen=True, slots=True)
class Rebuilt:
    """The logs read, their rounds rebuilt and the logged ones re-run under ``prefix``
    (``round_pass``: the pass that did it, which later stages read for the start round,
    the round times, the traffic and the baseline's continuity)."""

    rebuild: Rebuild
    #: the events read (a streamed replay keeps only the other ranks' and startup lines)
    events: pl.DataFrame
    summary: ParseSummary
    #: the logged rounds re-run (before the baseline's continuity is weighed)
    fidelity: Fidelity
    round_pass: RoundPass
    #: whether any line's time carries milliseconds (what a measured transfer can resolve)
    has_ms: bool
    #: rounds rebuilt, and of them with adder lines (a streamed replay keeps only some)
    rounds_seen: int
    logged_seen: int


@dataclass(frozen=True, slots=True)
class Checked:
    """The rebuilt rounds with the falls of the baseline the logged allocations do not
    explain (``rounds.continuity``) and the model profile they run under."""

    rebuilt: Rebuilt
    profile: ProfileChoice
    drops: tuple[Drop, ...]
    fidelity: Fidelity
    #: what the continuity of the baseline assumed
    notes: tuple[str, ...]

    @property
    def rebuild(self) -> Rebuild:
        return self.rebuilt.rebuild


@dataclass(frozen=True, slots=True)
class Runs:
    """Every policy run forward from the start round (none without a logged round)."""

    start_round: int | None = None
    results: dict[str, RunResult] = field(default_factory=dict)
    #: whether ``prefix`` runs out of memory as logged (None without a logged one)
    reproduced: bool | None = None
    #: the transfer time used, and the other readings of the log it was chosen from
    transfer: TransferEstimate | None = None
    #: round -> slots taken (> 0) or given back (< 0) outside the adder before that round,
    #: replayed under every policy: observed falls, and what the anchoring found
    exogenous: Mapping[int, int] = field(default_factory=dict)
    #: the events the observations from the start round to the out-of-memory require
    anchoring: Anchoring | None = None
    #: no KV transfer ends on the clock before this time of the forward runs
    hold_until: float = -math.inf
    #: each policy's answer over the transfer times and placements the log allows
    holds: dict[str, HoldsFor] = field(default_factory=dict)
    #: what the forward runs assumed (the round length, the transfers, the anchoring)
    notes: tuple[str, ...] = ()
    #: a fresh node at the start round under a policy (what the runs started from)
    builder: NodeBuilder | None = None
    #: the runs under each other transfer time the log supports (``ReplayOptions.costs``)
    costs: tuple[CostReading, ...] = ()


@dataclass(frozen=True, slots=True)
class Ran:
    """The forward runs over the checked rounds: what the findings read of a replay
    (``causes.Replayed``, ``whole_log.Replayed``)."""

    checked: Checked
    runs: Runs

    @property
    def rebuild(self) -> Rebuild:
        return self.checked.rebuild

    @property
    def results(self) -> dict[str, RunResult]:
        return self.runs.results

    @property
    def start_round(self) -> int | None:
        return self.runs.start_round

    @property
    def profile(self) -> ProfileChoice | None:
        return self.checked.profile

    @property
    def drops(self) -> tuple[Drop, ...]:
        return self.checked.drops

    @property
    def anchoring(self) -> Anchoring | None:
        return self.runs.anchoring

    @property
    def whole_log(self) -> WholeLog | None:  # gathered after the runs, in ``Findings``
        return None


@dataclass(frozen=True, slots=True)
class Findings:
    """The cause catalogue's findings (in catalogue order) and the whole-log findings,
    when gathered in the replay's own pass."""

    causes: tuple[Cause, ...]
    whole_log: WholeLog | None


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """A replay: the stages' values, assembled once (``assemble``)."""

    rebuild: Rebuild
    #: the events read (a streamed replay keeps only the other ranks' and startup lines)
    events: pl.DataFrame
    summary: ParseSummary
    fidelity: Fidelity
    results: dict[str, RunResult]
    start_round: int | None
    assumptions: tuple[str, ...]
    reproduced: bool | None
    #: a fresh node at the start round under a policy (what ``exec`` re-runs on tensors)
    builder: NodeBuilder | None
    #: the transfer time used, and the other readings of the log it was chosen from
    transfer: TransferEstimate | None
    #: falls of the baseline the logged allocations do not explain (``rounds.continuity``)
    drops: tuple[Drop, ...]
    #: the cause catalogue's findings, in catalogue order
    causes: tuple[Cause, ...]
    #: whether any line's time carries milliseconds (what a measured transfer can resolve)
    has_ms: bool
    #: rounds rebuilt, and of them with adder lines (a streamed replay keeps only some)
    rounds_seen: int
    logged_seen: int
    #: the whole-log findings, when gathered in the replay's own pass
    whole_log: WholeLog | None
    #: the model profile the policies ran under, and why that one
    profile: ProfileChoice | None
    #: round -> slots taken (> 0) or given back (< 0) outside the adder before that round,
    #: replayed under every policy: observed falls, and what the anchoring found
    exogenous: Mapping[int, int]
    #: the events the observations from the start round to the out-of-memory require
    anchoring: Anchoring | None
    #: no KV transfer ends on the clock before this time of the forward runs
    hold_until: float
    #: each policy's answer over the transfer times and placements the log allows
    holds: dict[str, HoldsFor]
    #: the runs under each transfer time the log supports (``ReplayOptions.costs``)
    costs: tuple[CostReading, ...]

    def cause(self, cid: str) -> Cause | None:
        return next((c for c in self.causes if c.id == cid), None)

    @property
    def observed_oom(self) -> OomFigures | None:
        o = self.rebuild.oom
        return OomFigures.of(o) if o else None

    def exit_code(self) -> int:
        if self.observed_oom and self.reproduced is False:
            return EXIT_NOT_REPRODUCED
        if self.fidelity.mismatches or self.rebuild.contradictions:
            return EXIT_MISMATCH
        return EXIT_OK

    def as_dict(self) -> dict[str, Any]:
        cfg = {k: v.as_dict() for k, v in self.rebuild.config.items()}
        return {
            "log": self.summary.to_dict() if hasattr(self.summary, "to_dict") else None,
            "config": cfg,
            "observed_oom": self.observed_oom.as_dict() if self.observed_oom else None,
            "reproduced": self.reproduced,
            "fidelity": self.fidelity.as_dict(),
            "start_round": self.start_round,
            "policies": self._policies(),
            "root_cause": self._root_cause(),
            "causes": [c.as_dict() for c in self.causes],
            "unexplained_drops": [d.as_dict() for d in self.drops],
            "contradictions": [c.as_dict() for c in self.rebuild.contradictions],
            "assumptions": list(self.assumptions),
            "profile": self.profile.as_dict() if self.profile else None,
            "anchoring": {
                "events": [x.as_dict() for x in self.anchoring.shifts],
                "unmet": [u.sentence() for u in self.anchoring.unmet],
            } if self.anchoring else None,
        }  # fmt: skip

    def _policies(self) -> dict[str, dict[str, Any]]:
        """Each policy's run: its out-of-memory, rounds, unfinished requests, and the
        first tokens it moves against ``prefix``."""
        policies = {}
        base = self.results.get(AS_RAN)
        for name, res in self.results.items():
            entry: dict[str, Any] = {
                "oom": res.oom.as_dict() if res.oom else None,
                "rounds": len(res.rounds),
                "unfinished": sorted(
                    r for r, q in res.requests.items() if q.finished_round is None
                ),
            }
            if base is not None and name != AS_RAN:
                entry["delays"] = [d.as_dict() for d in first_token_delays(base, res)]
            if name in self.holds:
                entry["holds_for"] = self.holds[name].as_dict()
            policies[name] = entry
        return policies

    def _root_cause(self) -> dict[str, Any] | None:
        """The ``unreserved_tail`` figures, when that story holds."""
        tail = self.cause("unreserved_tail")
        if tail is None or not tail.held:
            return None
        return tail.figures.as_dict() if tail.figures is not None else {}


def assemble(checked: Checked, runs: Runs, findings: Findings) -> ReplayResult:
    """The replay, from its stages' values."""
    rebuilt = checked.rebuilt
    return ReplayResult(
        rebuild=rebuilt.rebuild, events=rebuilt.events, summary=rebuilt.summary,
        fidelity=checked.fidelity, results=runs.results, start_round=runs.start_round,
        assumptions=checked.notes + runs.notes, reproduced=runs.reproduced,
        builder=runs.builder, transfer=runs.transfer, drops=checked.drops,
        causes=findings.causes, has_ms=rebuilt.has_ms, rounds_seen=rebuilt.rounds_seen,
        logged_seen=rebuilt.logged_seen, whole_log=findings.whole_log,
        profile=checked.profile, exogenous=runs.exogenous, anchoring=runs.anchoring,
        hold_until=runs.hold_until, holds=runs.holds, costs=runs.costs,
    )  # fmt: skip
