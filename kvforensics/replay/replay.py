"""``replay``: logs -> rebuilt rounds -> fidelity under ``prefix`` -> every policy run
forward from the round where the crashing request was admitted -> verdict."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypedDict

import polars as pl

from kvforensics.causes import Cause, Mechanism, classify, find_causes
from kvforensics.causes.oom import OomFigures
from kvforensics.causes.pools import readings
from kvforensics.collector import fewer_collections
from kvforensics.errors import InputError
from kvforensics.logs import ParseSummary, load_catalogue
from kvforensics.logs.source import check_readable
from kvforensics.model import PrefillNode, RoundRecord, RunResult, Timing
from kvforensics.model.profiles import FORK, Profile
from kvforensics.progress import IDLE, AnyStage, current, run_shown
from kvforensics.replay.anchor import (
    Anchor,
    Anchoring,
    anchor_run,
    anchors,
    evidence_check,
    freed_against,
)
from kvforensics.replay.arrivals import Shown
from kvforensics.replay.checks import Pipes, default_jobs, start
from kvforensics.replay.fidelity import Fidelity
from kvforensics.replay.holds import HoldsFor, holds_for, tried_seconds
from kvforensics.replay.passes import WINDOW, RoundPass, Timed
from kvforensics.replay.profile_choice import ProfileChoice, choose_profile
from kvforensics.replay.ranges import rangeable, run_ranges
from kvforensics.replay.state import arrivals_after, chunk_slots, node_at, shared_slots
from kvforensics.replay.stock import StockAnalysis, analyse_stock, fork_lines
from kvforensics.replay.transfers import estimate_latency
from kvforensics.replay.verdict import first_token_delays
from kvforensics.replay.whole_log import WholeLog
from kvforensics.rounds import Rebuild, Round, cross_check, from_logs
from kvforensics.rounds.drop import Drop
from kvforensics.rounds.provenance import Prov
from kvforensics.rounds.records import Contradiction
from kvforensics.rounds.stream import LogStream, Narrow, narrow_rounds

EXIT_OK, EXIT_INPUT, EXIT_MISMATCH, EXIT_NOT_REPRODUCED = 0, 2, 3, 4
LOWER_BOUND = "no transfer ended before the crash (lower bound)"
#: a counterfactual that never drains its queue is cut off here
MAX_ROUNDS = 10_000


class Build(Protocol):
    """A fresh node at the start round under a policy (``seconds``: another KV transfer
    time; ``events``: other outside allocations; ``hold``: no transfer ends before it)."""

    def __call__(
        self, policy: str, seconds: float | None = None, *, events: dict[int, int] | None = None,
        hold: float | None = None, record: bool = True,
    ) -> PrefillNode: ...


@dataclass(frozen=True, slots=True)
class TransferEstimate:
    """The KV transfer time the replay ran with, how it was arrived at, and the other
    values the same log supports (label -> seconds), for a reader to weigh."""

    seconds: float
    how: str  # given | inferred | derived | assumed
    alternatives: dict[str, float]


@dataclass
class ReplayResult:
    rebuild: Rebuild
    #: the events read (a streamed replay keeps only the other ranks' and startup lines)
    events: pl.DataFrame
    summary: ParseSummary
    fidelity: Fidelity
    results: dict[str, RunResult]
    start_round: int | None
    assumptions: list[str] = field(default_factory=list)
    reproduced: bool | None = None
    #: a fresh node at the start round under a policy (what ``exec`` re-runs on tensors);
    #: ``seconds`` replaces the KV transfer time the replay settled on
    build_node: Callable[..., PrefillNode] | None = None
    #: the transfer time used, and the other readings of the log it was chosen from
    transfer: TransferEstimate | None = None
    #: falls of the baseline the logged allocations do not explain (``rounds.continuity``)
    drops: list[Drop] = field(default_factory=list)
    #: the cause catalogue's findings, in catalogue order
    causes: list[Cause] = field(default_factory=list)
    #: whether any line's time carries milliseconds (what a measured transfer can resolve)
    has_ms: bool = False
    #: rounds rebuilt, and of them with adder lines (a streamed replay keeps only some)
    rounds_seen: int = 0
    logged_seen: int = 0
    #: the whole-log findings, when gathered in the replay's own pass
    whole_log: WholeLog | None = None
    #: the model profile the policies ran under, and why that one
    profile: ProfileChoice | None = None
    #: round -> slots taken (> 0) or given back (< 0) outside the adder before that round,
    #: replayed under every policy: observed falls, and what the anchoring found
    exogenous: dict[int, int] = field(default_factory=dict)
    #: the events the observations from the start round to the out-of-memory require
    anchoring: Anchoring | None = None
    #: no KV transfer ends on the clock before this time of the forward runs
    hold_until: float = -math.inf
    #: each policy's answer over the transfer times and placements the log allows
    holds: dict[str, HoldsFor] = field(default_factory=dict)

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
        policies = {}
        base = self.results.get("prefix")
        for name, res in self.results.items():
            entry: dict[str, Any] = {
                "oom": res.oom.as_dict() if res.oom else None,
                "rounds": len(res.rounds),
                "unfinished": sorted(
                    r for r, q in res.requests.items() if q.finished_round is None
                ),
            }
            if base is not None and name != "prefix":
                entry["delays"] = [d.as_dict() for d in first_token_delays(base, res)]
            if name in self.holds:
                entry["holds_for"] = self.holds[name].as_dict()
            policies[name] = entry
        return {
            "log": self.summary.to_dict() if hasattr(self.summary, "to_dict") else None,
            "config": cfg,
            "observed_oom": self.observed_oom.as_dict() if self.observed_oom else None,
            "reproduced": self.reproduced,
            "fidelity": self.fidelity.as_dict(),
            "start_round": self.start_round,
            "policies": policies,
            "root_cause": self._root_cause(),
            "causes": [c.as_dict() for c in self.causes],
            "unexplained_drops": [d.as_dict() for d in self.drops],
            "contradictions": [c.as_dict() for c in self.rebuild.contradictions],
            "assumptions": self.assumptions,
            "profile": self.profile.as_dict() if self.profile else None,
            "anchoring": {
                "events": [x.as_dict() for x in self.anchoring.shifts],
                "unmet": [u.sentence() for u in self.anchoring.unmet],
            } if self.anchoring else None,
        }

    def _root_cause(self) -> dict[str, Any] | None:
        """The ``unreserved_tail`` figures, when that story holds."""
        tail = self.cause("unreserved_tail")
        if tail is None or not tail.held:
            return None
        return tail.figures.as_dict() if tail.figures is not None else {}


@fewer_collections()
def replay_logs(
    paths: list[Path],
    policies: list[str],
    *,
    overrides: dict[str, int | None] | None = None,
    transfer_seconds: float | None = None,
    rank: str | None = None,
    progress: bool = False,
    formats: list[Path] | None = None,
    stock: bool = False,
    narrow: Narrow | None = None,
    stream: bool = False,
    whole_log: bool = False,
    window: int = WINDOW,
    profile: str | None = None,
    jobs: int | None = None,
    engine: str = "local",
) -> ReplayResult | StockAnalysis:
    """Logs -> replay. With ``stock``, a log without adder lines gives the analysis of what
    it can tell (``StockAnalysis``) instead of an error. ``stream``: one pass in batches
    that keeps only what the verdict, the causes and the forward runs need (``window``
    recent rounds and the pinned ones; ``events`` then holds the other ranks' and startup
    lines only); otherwise every event and round is kept (what ``report`` writes out).
    ``whole_log``: gather the whole-log findings (``whole_log.WholeLog``) in the same pass.
    ``narrow``: only the rounds within ``--since``/``--until`` are checked and replayed
    (reading stops after ``--until``). ``profile``: the model profile's name (default: the
    one the log's lines tell, else the fork's). ``jobs``: 2 re-runs the rounds of a streamed
    replay in a second process as they are rebuilt (the same result; default: 2 for large logs
    where there are two CPUs, ``checks.default_jobs``), 1 keeps everything in this one; on
    one plain log, 2 or more given split it over that many workers by byte ranges
    (``ranges``; the same result) on ``engine`` (local processes or Ray), else (and by
    default) the second process."""
    narrow = narrow or Narrow()
    args = _LogArgs(overrides=overrides or {}, rank=rank, formats=formats, progress=progress)
    paths = [Path(p) for p in paths]
    for p in paths:  # the reader's own one-line errors, before the release is looked for
        check_readable(p)
    choice = choose_profile(paths, profile)
    if stream:
        given, jobs = jobs is not None, default_jobs(paths) if jobs is None else jobs
        got: tuple[ReplayResult, RoundPass] | _Unreplayable | None = None
        if given and rangeable(paths, jobs) and not narrow:
            try:
                got = _ranged(paths[0], args, narrow, window, whole_log, choice.profile, jobs,
                              engine)  # fmt: skip
            except Exception:  # NotRanged, or anything the join did not foresee:
                got = None  # the one pass below: the same answer, or the error in its words
        if got is None:
            got = _streamed(paths, args, narrow, window, whole_log, choice.profile, min(jobs, 2))
    else:
        got = _whole(paths, args, narrow, whole_log, choice.profile)
    if isinstance(got, _Unreplayable):  # no adder line
        out = _unreplayable(got.events, got.summary, formats, overrides, stock)
        out.profile = choice
        return out
    rr, ps = got
    rr.profile = choice
    rr.drops = ps.continuity.drops(rr.rebuild.drops)
    rr.assumptions.extend(ps.continuity.notes)
    rr.fidelity = rr.fidelity.with_drops(len(rr.drops))
    _run_policies(rr, ps, policies, transfer_seconds, choice.profile)
    rr.causes = find_causes(rr)
    rr.whole_log = ps.checks.finish(rr, _round_seconds(ps.timed))
    return rr


class _LogArgs(TypedDict):
    """How the logs are read (``from_logs``'s and ``LogStream``'s options)."""

    overrides: dict[str, int | None]
    rank: str | None
    formats: list[Path] | None
    progress: bool


class _Unreplayable(NamedTuple):
    """Logs without an adder line: what was read of them."""

    events: pl.DataFrame
    summary: ParseSummary


def _whole(
    paths: list[Path], args: _LogArgs, narrow: Narrow, whole_log: bool, profile: Profile
) -> tuple[ReplayResult, RoundPass] | _Unreplayable:
    logs = from_logs(paths, hold=True, narrow=narrow, **args)
    if logs.rebuild is None:
        return _Unreplayable(logs.events, logs.summary)
    rb = logs.rebuild
    ps = RoundPass(rb.cfg, dict(rb.seq_lens), window=None, whole=whole_log, profile=profile)
    checked = current().stage("checking rounds", len(rb.rounds), "rounds")
    for rnd in rb.rounds:
        ps.add(rnd)
        checked.advance()
    checked.done()
    rr = ReplayResult(rb, logs.events, logs.summary, ps.checks.result(), {}, None)
    rr.has_ms = _has_ms(logs.events)
    rr.rounds_seen, rr.logged_seen = len(rb.rounds), ps.logged
    return rr, ps


def _streamed(
    paths: list[Path], args: _LogArgs, narrow: Narrow, window: int, whole_log: bool,
    profile: Profile, jobs: int,
) -> tuple[ReplayResult, RoundPass] | _Unreplayable:
    link = start(jobs)  # before the read, so that its start overlaps the first reads
    ps: RoundPass | None = None
    try:
        ls = LogStream(paths, args["overrides"], args["rank"], args["formats"],
                       args["progress"], hold=True)  # fmt: skip
        st = current()
        checked: AnyStage = IDLE  # stages below the read's: rebuilt, then checked
        for rnd in narrow_rounds(st.counted(ls, "rebuilding rounds", "rounds"), narrow):
            if ps is None:
                ps = RoundPass(ls.settled_cfg(), ls.rebuilding().seq_lens, window, whole_log,
                               profile, link)  # fmt: skip
                checked = st.stage("checking rounds", unit="rounds")
            ps.add(rnd)
            checked.advance()
        checked.done()
    except BaseException:
        _stop(ps, link)
        raise
    if ps is None or ls.unreplayable is not None:  # nothing for the second process to do
        _stop(ps, link)
    if ls.unreplayable is not None:
        return _Unreplayable(ls.unreplayable, ls.summary)
    rebuilder = ls.rebuilding()
    if ps is None:  # no round at all
        ps = RoundPass(ls.settled_cfg(), rebuilder.seq_lens, window, whole_log, profile=profile)
    return _ended(ls, ps, narrow)


def _ranged(
    path: Path, args: _LogArgs, narrow: Narrow, window: int, whole_log: bool, profile: Profile,
    jobs: int, engine: str,
) -> tuple[ReplayResult, RoundPass]:  # fmt: skip
    """One plain log over byte ranges (``ranges``): the workers read, rebuild and re-run
    their ranges; this process takes the rounds in order for what spans them (the rounds
    kept, continuity, the traffic, the arrivals). Raises ``NotRanged`` where it cannot."""
    opts = {"overrides": args["overrides"] or {}, "rank": args["rank"],
            "formats": args["formats"], "profile": profile, "whole": whole_log,
            "window": window}  # fmt: skip
    joined = run_ranges(path, jobs, opts, engine=engine)
    ls = joined.stream
    lens = ls.rebuilding().seq_lens
    ps = RoundPass(ls.settled_cfg(), lens, window, whole_log, profile)
    checks = ps.checks = joined.checks(ps.known, profile, whole_log)
    st = current()
    checked = st.stage("checking rounds", unit="rounds")
    for rnd, sets in st.counted(joined.rounds(), "rebuilding rounds", "rounds"):
        for rid, n in sets:
            lens[rid] = n
        ps.add(rnd)
        checked.advance()
    checked.done()
    checks.attach()
    joined.whole(ps.kept())
    return _ended(ls, ps, narrow)


def _ended(ls: LogStream, ps: RoundPass, narrow: Narrow) -> tuple[ReplayResult, RoundPass]:
    """The stream has ended: the rebuild as kept, cross-checked against the other lines."""
    rebuilder = ls.rebuilding()
    kept = ps.kept()
    conf, changed = ls.settled_config()
    rb = rebuilder.collected(kept, {**conf, **rebuilder.config()}, ls.deciding())
    if changed:
        rb.contradictions.append(Contradiction(None, "configuration", changed))
    rb.seq_lens = ps.kept_seq_lens(kept)
    narrow.trim(rb)
    ps.keys.kept = {r.index: r for r in kept}
    for rnd in cross_check(rb, ls.side, keys=ps.keys, spans=ls.spans):
        ps.late(rnd)
    rr = ReplayResult(rb, ls.side, ls.summary, ps.checks.result(), {}, None)
    rr.has_ms = ls.has_ms
    rr.rounds_seen = rebuilder.count + (len(rb.rounds) - len(kept))
    rr.logged_seen = ps.logged
    return rr, ps


def _stop(ps: RoundPass | None, link: Pipes | None) -> None:
    """Stop the second process, whether or not a pass took it on."""
    if ps is not None:
        ps.checks.close()
    elif link is not None:
        link.close()


def _unreplayable(
    events: pl.DataFrame, summary: ParseSummary, formats: list[Path] | None,
    overrides: dict[str, int | None] | None, stock: bool,
) -> StockAnalysis:
    """Logs without adder lines: what a release's log tells, else why nothing can be
    replayed, in one line."""
    cat = load_catalogue(formats)
    if stock and not fork_lines(events, cat):  # a release's log: what it can tell
        return analyse_stock(events, summary, cat, overrides)
    if summary.decode_node:
        raise InputError(
            "these are a decode (or colocated) node's logs (Decode batch lines): "
            "kvforensics replays prefill nodes"
        )
    hint = "" if fork_lines(events, cat) else "; `kvforensics replay` tells what this log shows"
    raise InputError(
        "no PrefillAdder lines in these logs, nothing to replay: give the deciding rank's "
        f"(PP0) log of a build that prints them (upstream SGLang releases do not){hint}"
    )


def _round_seconds(timed: Timed) -> float:
    """The log's span over its timed rounds (1 s when it times fewer than two)."""
    if timed.count < 2 or timed.last is None or timed.last.time is None or timed.first is None:
        return 1.0
    if timed.last.time <= timed.first:
        return 1.0
    return timed.span() / (timed.count - 1)


def _run_policies(
    rr: ReplayResult, ps: RoundPass, policies: list[str], transfer_seconds: float | None,
    profile: Profile = FORK,
) -> None:
    """Every policy forward from the start round, the observed outside allocations and
    the requests that arrived since replayed where they were seen (facts of the world, not
    decisions)."""
    rb = rr.rebuild
    found = _start_round(rb, ps)
    if found is None:
        return
    start, later, shown = found
    rr.start_round = start.index
    readings: dict[str, float] = {}
    timing, inflight, how = _transfer_model(
        rr, start, later, ps, transfer_seconds, readings
    )
    rr.transfer = TransferEstimate(timing.transfer_latency_s, how, readings)

    outside = _given(rr)
    if outside and not anchors(rb, start):
        rr.assumptions.append(
            "outside allocations replayed under every policy: "
            + ", ".join(f"{t} tokens before round {r}" for r, t in sorted(outside.items()))
            + " (observed falls of the baseline; held to the end of the run)"
        )

    _note_arrivals(shown, start, timing.round_overhead_s, rr.assumptions)
    stuck = _unevictable(rb, start, rr.assumptions)
    swa = _swa_pool(rb, start, rr.assumptions)

    def build(policy: str, seconds: float | None = None, *, events: dict[int, int] | None = None,
              hold: float | None = None, record: bool = True) -> PrefillNode:  # fmt: skip
        t, inf = timing, inflight
        arrivals = arrivals_after(shown, start, timing.round_overhead_s)
        if seconds is not None:  # same transfers, each ending ``shift`` later
            shift = seconds - timing.transfer_latency_s
            t = replace(timing, transfer_latency_s=seconds)
            inf = [(rid, n, at + shift) for rid, n, at in inflight]
        return node_at(
            rb, start, policy, arrivals=arrivals, inflight=inf, timing=t,
            outside=rr.exogenous if events is None else events, unevictable=stuck,
            swa_pool_size=swa, profile=profile, ops=record, record=record,
            hold_until=rr.hold_until if hold is None else hold,
        )  # fmt: skip

    rr.exogenous = outside
    _anchor(rr, start, build, timing)
    rr.build_node = build
    for policy in dict.fromkeys(["prefix", *policies]):
        rr.results[policy] = run_shown(build(policy), f"policy {policy}", MAX_ROUNDS)
    if rb.oom:
        got = rr.results["prefix"].oom
        o = rb.oom
        rr.reproduced = got is not None and (got.round, got.rid, got.tokens, got.available) == (
            o.round, o.rid, o.tokens, o.available,
        )  # fmt: skip
        _sensitivity(rr, build, timing, readings)


def _anchor(rr: ReplayResult, start: Round, build: Build, timing: Timing) -> None:
    """Hold ``prefix`` to every observation from the start round to the out-of-memory:
    the exogenous events they require join the events every policy replays, and no
    transfer ends on the clock inside that window (``anchor``'s note)."""
    rb = rr.rebuild
    marks = anchors(rb, start)
    if not marks:
        return
    per_round = timing.round_overhead_s
    hold = (marks[-1].round + 1 - start.index) * per_round
    # NOTE: the falls the rebuild inferred inside the window are not taken as given: the
    # anchoring finds every event there from the observations themselves
    node = build("prefix", events={}, hold=hold, record=False)
    found = anchor_run(node, marks, evidence_check(rb), start=start.index, page=rb.cfg.page_size)
    rr.anchoring, rr.hold_until = found, hold
    rr.exogenous = found.schedule({})
    rr.assumptions.append(
        f"rounds {start.index}..{marks[-1].round} are held to the {len(marks)} observation(s) "
        "in them (logged baselines, the out-of-memory line): no KV transfer ends there "
        "unless one shows it"
    )
    rr.assumptions.extend(f"observed: {s.sentence()}" for s in found.shifts)
    rr.assumptions.extend(f"not met: {u.sentence()}" for u in found.unmet)
    _assumption_against_evidence(rr, build, marks[-1], start)


def _assumption_against_evidence(
    rr: ReplayResult, build: Build, mark: Anchor, start: Round
) -> None:
    """Say so where the transfer time the replay runs with would free memory inside the
    anchored window that the observations show was not there."""
    node = build("prefix", hold=-math.inf, record=False)
    if not isinstance(node.step(), RoundRecord):
        return
    freed = freed_against(node, mark)
    if freed > 0 and rr.transfer is not None:
        rr.assumptions.append(
            f"contradicted by the evidence: KV transfers of {rr.transfer.seconds:.2f} s "
            f"({rr.transfer.how}) would free {freed} slots by round {mark.round}, where the "
            f"logs show {mark.value} {'available' if mark.kind == 'oom' else 'as its baseline'} "
            f"({mark.where}); inside rounds {start.index}..{mark.round} the "
            "observations decide, the transfer time only after them"
        )


def _sensitivity(
    rr: ReplayResult, build: Build, timing: Timing, readings: dict[str, float]
) -> None:
    """Every policy over the transfer times the log allows and the placements of the
    events found between silent rounds (``holds``)."""
    lower = readings.get(LOWER_BOUND)
    chosen = rr.transfer.seconds if rr.transfer else timing.transfer_latency_s
    seconds = tried_seconds(chosen, readings, lower)
    found = rr.anchoring
    picks = [(0, False, 0)]
    if found is not None and found.variants() > 1:
        picks.append((-1, False, 0))
    if found is not None and found.saturated():
        picks += [(p, True, 0) for p, _, _ in picks]
    # NOTE: the events are placed by round under prefix, whose rounds the logs show; under
    # another policy the rounds run differently, and the time each event happened may
    # fall a round either side
    moved = picks + [(p, m, o) for p, m, _ in picks for o in (-1, 1)]
    pool = rr.rebuild.cfg.pool_size

    def run(policy: str) -> Callable[[float, int, bool, int], bool]:
        def one(sec: float, pick: int, most: bool, offset: int) -> bool:
            events = (
                rr.exogenous if found is None else found.schedule({}, pick, pool * most, offset)
            )
            node = build(policy, sec, events=events, record=False)
            return node.run(MAX_ROUNDS).oom is not None

        return one

    allowed = (lower if lower is not None else min(seconds), None)
    events = found is not None and bool(found.shifts)
    for policy in rr.results:
        mine = moved if events and policy != "prefix" else picks
        rr.holds[policy] = holds_for(policy, run(policy), seconds, mine, allowed)


def _given(rr: ReplayResult) -> dict[int, int]:
    """The events before anchoring: the observed falls of the baseline."""
    return {d.before_round: d.tokens for d in rr.drops if d.before_round > (rr.start_round or 0)}


def _note_arrivals(shown: list[Shown], start: Round, per_round: float, notes: list[str]) -> None:
    """Say which requests the forward runs meet as arrivals, and when on their clock."""
    if not shown:
        return
    first, last = shown[0].round, shown[-1].round
    where = f"round {first}" if first == last else f"rounds {first}..{last}"
    many = len(shown) > 1
    notes.append(
        f"{len(shown)} request{'s' * many} first shown after round {start.index} ({where}) "
        f"replayed as {'arrivals' if many else 'an arrival'} under every policy, "
        f"{'each ' * many}half a round before the round that first shows it (the node's "
        f"clock: a round lasts {per_round:.2f} s from round {start.index}), with the lengths "
        "of its first check (observed); one that waited unseen behind a refusal is taken to "
        "arrive then too (assumed)"
    )


def _unevictable(rb: Rebuild, start: Round, notes: list[str]) -> int:
    """Cache the out-of-memory line still shows as evictable after the allocator evicted
    what it could: it could not be freed. A fact of the world, like an outside allocation:
    held from the start round, under every policy."""
    o = rb.oom
    if not o or classify(o.tokens, readings(o)).mechanism is not Mechanism.EVICTION_SHORTFALL:
        return 0
    stuck = o.evictable_size or 0
    if stuck:
        notes.append(
            f"{stuck} slots of cache could not be evicted ({o.where}: still evictable "
            f"after the allocator evicted what it could); held so from round {start.index} "
            "under every policy (inferred)"
        )
    return stuck


def _swa_pool(rb: Rebuild, start: Round, notes: list[str]) -> int | None:
    """The SWA pool's size when the out-of-memory line shows one: it holds the same tokens
    as the full pool (pieces inside the window), so it is short of the full pool by what
    the two lines differ (0 when they agree), from the start round on. The logged size
    wins."""
    o = rb.oom
    if rb.cfg.swa_pool_size is not None or not o or o.swa_available is None or o.available is None:
        return rb.cfg.swa_pool_size
    short = o.available - o.swa_available
    if not 0 <= short < rb.cfg.pool_size:
        return None
    notes.append(
        f"an SWA pool of {rb.cfg.pool_size - short} slots ({o.where}: {o.swa_available} "
        f"available in it against {o.available} in the full pool; inferred: it holds what the "
        f"full pool holds, {short} slots smaller), the same from round {start.index} under "
        "every policy"
    )
    return rb.cfg.pool_size - short


def _start_round(rb: Rebuild, ps: RoundPass) -> tuple[Round, Timed, list[Shown]] | None:
    """The logged round where the request that ran out of memory was first truncated;
    without an out-of-memory, the last logged round. With it, the timed rounds since and
    the requests first shown since (none after the last logged round)."""
    if ps.last_logged is None:
        return None
    if rb.oom and rb.oom.rid:
        found = ps.truncation(rb.oom.rid)
        if found is not None:
            return *found, ps.arrivals.since(rb.oom.rid)
    return ps.last_logged, ps.since_logged, []


def _transfer_model(
    rr: ReplayResult,
    start: Round,
    later: Timed,
    ps: RoundPass,
    seconds: float | None,
    readings: dict[str, float],
) -> tuple[Timing, list[tuple[str, int, float]], str]:
    """Rounds last as long as the log says; KV transfers release memory after ``seconds``
    (returned with how that was arrived at; the other readings go into ``readings``).

    The memory held at the start round (pool - baseline) belongs to requests whose KV is
    being sent; the batch lines' ``#inflight-req`` says how many. With no frees observed
    until the crash, no transfer ended before it: that bounds the transfer time from below.
    """
    rb, notes = rr.rebuild, rr.assumptions
    span = later.span()
    # Round length from the rounds replayed, or from the whole log when they are too few.
    timed = later if later.count > 1 and span > 0 else ps.timed
    whole = timed.span()
    per_round = whole / (timed.count - 1) if whole > 0 else 1.0
    notes.append(
        f"a round lasts {per_round:.2f} s (derived: {timed.count} rounds over {whole:.0f} s of log time)"
        if whole > 0
        else "a round lasts 1.00 s (assumed: the log times no two rounds)"
    )
    est = estimate_latency(*ps.traffic.before(start.index))
    if est is not None:
        readings["median of the traffic before"] = est[0]
        readings["upper quartile of the traffic before"] = est[1][1]
        notes.append(
            f"the traffic before round {start.index} shows KV transfers taking {est[0]:.2f} s "
            f"(median; quartiles {est[1][0]:.2f}-{est[1][1]:.2f} s; derived: baseline rises between "
            "logged rounds paid out of finished requests in finishing order)"
            + (
                "; the log's timestamps have 1 s resolution, so that is all it can resolve"
                if est[1][1] <= 1.0 and not rr.has_ms
                else ""
            )
        )
    how = "given" if seconds is not None else "inferred"
    bound = _no_transfer_bound(rb, later, span, per_round)
    if bound is not None:
        readings[LOWER_BOUND] = bound
    if seconds is not None:
        notes.append(f"KV transfers take {seconds:.2f} s (given: --transfer-seconds)")
    else:
        seconds, how = _transfer_seconds(rb, start, later, span, per_round, est, notes, readings)
    inflight = _inflight(rb, start, seconds, per_round, notes)
    return Timing(round_overhead_s=per_round, transfer_latency_s=seconds), inflight, how


def _transfer_seconds(
    rb: Rebuild, start: Round, later: Timed, span: float, per_round: float,
    est: tuple[float, tuple[float, float]] | None, notes: list[str], readings: dict[str, float],
) -> tuple[float, str]:
    """When the logged OOM's availability is what the rounds since the start leave with no
    transfer ending, none ended: the transfer time is at least that span."""
    last = later.last
    bound = _no_transfer_bound(rb, later, span, per_round)
    if bound is not None:
        # a bound needs the out-of-memory and the last timed round (``_no_transfer_bound``)
        assert rb.oom is not None and last is not None
        seconds = max(bound, est[1][1]) if est else bound
        notes.append(
            f"KV transfers take {seconds:.2f} s (inferred: the out-of-memory line's "
            f"{rb.oom.available} available is what rounds {start.index}..{last.index} "
            f"leave if no transfer ended, so none did for {span:.0f} s"
            + ("; slower than in the traffic before" if est and est[1][1] < bound else "")
            + "; override with --transfer-seconds)"
        )
        return seconds, "inferred"
    if est is not None:
        seconds = max(est[1][1], per_round)
        notes.append(
            f"KV transfers take {seconds:.2f} s (the traffic's upper quartile, at least a round)"
        )
        return seconds, "derived"
    seconds = span + per_round
    notes.append(
        f"KV transfers take {seconds:.2f} s (assumed: the log gives no measure; "
        "override with --transfer-seconds)"
    )
    return seconds, "assumed"


def _no_transfer_bound(rb: Rebuild, later: Timed, span: float, per_round: float) -> float | None:
    """The transfer time's lower bound when the logged out-of-memory's availability is what
    the rounds since the start leave with no transfer ending (None otherwise)."""
    last = later.last
    if rb.oom and last is not None and last.baseline is not None and (
        rb.oom.available == last.baseline.value
    ):
        return span + per_round
    return None


def _inflight(
    rb: Rebuild, start: Round, seconds: float, per_round: float, notes: list[str]
) -> list[tuple[str, int, float]]:
    """The memory held at the start round, split among the requests whose KV is being
    sent, each released ``seconds`` after the start (one after another)."""
    base = start.baseline.value if start.baseline and start.baseline.value is not None else 0
    # NOTE: a chunk the start round resumes and a prefix already locked are outside the
    # baseline too; the node holds them apart, so they are not in transfer
    chunk, shared = chunk_slots(rb.cfg, start), shared_slots(rb.cfg, start)
    held = max(0, rb.cfg.pool_size - base - chunk - shared)
    count, source = 1, "no batch line: assumed one"
    if start.batch and start.batch.get("inflight_req") is not None:
        # The batch line is printed after the round's forward: the requests that finished
        # in that round are already counted, so take them out again.
        finished = sum(1 for d in start.decisions if d.decision == "full")
        count = max(1, int(start.batch["inflight_req"]) - finished)
        source = (
            f"{start.batch['where']} #inflight-req: {start.batch['inflight_req']} "
            f"minus {finished} finished in that round (derived)"
        )
    page = rb.cfg.page_size
    share = held // count // page * page
    inflight = [
        (f"inflight-{i:02d}", share, seconds + i * per_round / max(count, 1)) for i in range(count)
    ]
    if held - share * count:
        inflight.append(("inflight-rest", held - share * count, seconds + per_round))
    notes.append(
        f"{held} slots held by requests in KV transfer at round {start.index} "
        f"(derived: pool {rb.cfg.pool_size} - baseline {base}"
        + (f" - {chunk} held by the chunk it resumes" if chunk else "")
        + (f" - {shared} of prefixes already locked" if shared else "")
        + f"); {count} of them ({source}), "
        "holding equal shares and finishing one after another (assumed)"
    )
    return inflight


def _has_ms(events: pl.DataFrame) -> bool:
    return "time_has_ms" in events.columns and bool(events["time_has_ms"].any())


__all__ = [
    "EXIT_INPUT",
    "EXIT_MISMATCH",
    "EXIT_NOT_REPRODUCED",
    "EXIT_OK",
    "Prov",
    "ReplayResult",
    "TransferEstimate",
    "replay_logs",
]
