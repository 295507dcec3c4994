"""``replay``: logs -> rebuilt rounds -> fidelity under ``prefix`` -> every policy run
forward from the round where the crashing request was admitted -> verdict.

Each stage is a value built once (``stages``): ``Rebuilt`` (the rounds rebuilt and re-run
under ``prefix``), ``Checked`` (against the baseline's continuity), ``Runs`` (the forward
runs), ``Findings`` (the causes, the whole-log findings); ``ReplayResult`` is assembled
from them."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import polars as pl

from kvforensics.causes import Mechanism, classify, find_causes
from kvforensics.causes.oom import OomFigures
from kvforensics.causes.pools import readings
from kvforensics.collector import fewer_collections
from kvforensics.logs import ParseSummary, load_catalogue
from kvforensics.logs.source import check_readable
from kvforensics.model import RoundRecord, RunResult, Timing
from kvforensics.model.policies import AS_RAN
from kvforensics.model.profiles import Profile
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
from kvforensics.replay.costs import cost_readings
from kvforensics.replay.forward import LOWER_BOUND, MAX_ROUNDS, NodeBuilder, TransferEstimate
from kvforensics.replay.holds import HoldsFor, Pick, holds_for, tried_seconds
from kvforensics.replay.passes import WINDOW, RoundPass, Timed
from kvforensics.replay.profile_choice import ProfileChoice, choose_profile
from kvforensics.replay.ranges import RangeOptions, rangeable, run_ranges
from kvforensics.replay.stages import (
    EXIT_INPUT,
    EXIT_MISMATCH,
    EXIT_NOT_REPRODUCED,
    EXIT_OK,
    Checked,
    Findings,
    Ran,
    Rebuilt,
    ReplayOptions,
    ReplayResult,
    Runs,
    assemble,
)
from kvforensics.replay.state import chunk_slots, observed_evictions, shared_slots
from kvforensics.replay.stock import NoAdderLines
from kvforensics.replay.transfers import estimate_latency
from kvforensics.replay.unseen import blind_rounds, least_take
from kvforensics.rounds import Rebuild, Round, cross_check, from_logs
from kvforensics.rounds.drop import Drop
from kvforensics.rounds.provenance import Prov
from kvforensics.rounds.records import Contradiction
from kvforensics.rounds.stream import LogStream, Narrow, narrow_rounds


@fewer_collections()
def replay_logs(paths: Sequence[Path], options: ReplayOptions) -> ReplayResult:
    """Logs -> replay, as ``options`` says (``stages.ReplayOptions``): the rounds rebuilt
    and re-run under ``prefix``, checked against the baseline's continuity, every policy
    run forward from the start round, the findings over them. Logs without adder lines
    raise ``stock.NoAdderLines`` (an InputError); a release's log still tells what its
    ``stock()`` analyses."""
    paths = [Path(p) for p in paths]
    for p in paths:  # the reader's own one-line errors, before the release is looked for
        check_readable(p)
    choice = choose_profile(paths, options.profile)
    checked = _checked(_rebuilt(paths, options, choice), choice)
    runs = _run_policies(checked, options)
    return assemble(checked, runs, _findings(Ran(checked, runs)))


@dataclass(frozen=True, slots=True)
class _LogArgs:
    """How the logs are read (``from_logs``'s and ``LogStream``'s options)."""

    overrides: dict[str, int | None]
    rank: str | None
    formats: list[Path] | None
    progress: bool


def _rebuilt(paths: list[Path], options: ReplayOptions, choice: ProfileChoice) -> Rebuilt:
    """The rounds rebuilt and re-run under ``prefix``: streamed (over byte ranges where
    that was asked for and one plain log allows it), else whole."""
    narrow, whole_log, window = options.narrow, options.whole_log, options.window
    formats = list(options.formats) if options.formats is not None else None
    args = _LogArgs(overrides=dict(options.overrides), rank=options.rank, formats=formats,
                    progress=options.progress)  # fmt: skip
    if not options.stream:
        return _whole(paths, args, narrow, whole_log, choice)
    given = options.jobs is not None
    jobs = default_jobs(paths) if options.jobs is None else options.jobs
    if given and rangeable(paths, jobs) and not narrow:
        # NotRanged, or anything the join did not foresee: the one pass below gives the
        # same answer, or the error in its words
        with suppress(Exception):
            return _ranged(paths[0], args, narrow, window, whole_log, choice.profile, jobs,
                           options.engine)  # fmt: skip
    return _streamed(paths, args, narrow, window, whole_log, choice, min(jobs, 2))


def _no_adder_lines(
    events: pl.DataFrame, summary: ParseSummary, args: _LogArgs, choice: ProfileChoice
) -> NoAdderLines:
    """Logs without an adder line: why nothing can be replayed, with what was read (what a
    release's log tells, ``NoAdderLines.stock``)."""
    return NoAdderLines(events, summary, load_catalogue(args.formats), args.overrides, choice)


def _whole(
    paths: list[Path], args: _LogArgs, narrow: Narrow, whole_log: bool, choice: ProfileChoice
) -> Rebuilt:
    logs = from_logs(paths, overrides=args.overrides, rank=args.rank, formats=args.formats,
                     progress=args.progress, hold=True, narrow=narrow)  # fmt: skip
    if logs.rebuild is None:
        raise _no_adder_lines(logs.events, logs.summary, args, choice)
    rb = logs.rebuild
    ps = RoundPass(rb.cfg, dict(rb.seq_lens), window=None, whole=whole_log,
                   profile=choice.profile)  # fmt: skip
    checked = current().stage("checking rounds", len(rb.rounds), "rounds")
    for rnd in rb.rounds:
        ps.add(rnd)
        checked.advance()
    checked.done()
    return Rebuilt(rb, logs.events, logs.summary, ps.checks.result(), ps,
                   has_ms=_has_ms(logs.events), rounds_seen=len(rb.rounds),
                   logged_seen=ps.logged)  # fmt: skip


def _streamed(
    paths: list[Path], args: _LogArgs, narrow: Narrow, window: int, whole_log: bool,
    choice: ProfileChoice, jobs: int,
) -> Rebuilt:  # fmt: skip
    link = start(jobs)  # before the read, so that its start overlaps the first reads
    ps: RoundPass | None = None
    profile = choice.profile
    try:
        ls = LogStream(paths, args.overrides, args.rank, args.formats, args.progress, hold=True)
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
        raise _no_adder_lines(ls.unreplayable, ls.summary, args, choice)
    rebuilder = ls.rebuilding()
    if ps is None:  # no round at all
        ps = RoundPass(ls.settled_cfg(), rebuilder.seq_lens, window, whole_log, profile=profile)
    return _ended(ls, ps, narrow)


def _ranged(
    path: Path, args: _LogArgs, narrow: Narrow, window: int, whole_log: bool, profile: Profile,
    jobs: int, engine: str,
) -> Rebuilt:  # fmt: skip
    """One plain log over byte ranges (``ranges``): the workers read, rebuild and re-run
    their ranges; this process takes the rounds in order for what spans them (the rounds
    kept, continuity, the traffic, the arrivals). Raises ``NotRanged`` where it cannot."""
    opts = RangeOptions(args.overrides or {}, args.rank, args.formats, profile, whole_log,
                        window=window)  # fmt: skip
    joined = run_ranges(path, jobs, opts, engine=engine)
    ls = joined.stream
    lens = ls.rebuilding().seq_lens
    ps = RoundPass(ls.settled_cfg(), lens, window, whole_log, profile)
    checks = ps.checks = joined.checks(ps.known, profile, whole_log)
    st = current()
    rebuilt, checked = (st.stage(n, unit="rounds") for n in ("rebuilding rounds", "checking rounds"))

    def shown(n: int) -> None:
        rebuilt.advance(n)
        checked.advance(n)

    try:
        joined.fold(ps, shown)
    finally:
        joined.close()
    rebuilt.done()
    checked.done()
    checks.attach()
    joined.whole(ps.kept())
    return _ended(ls, ps, narrow)


def _ended(ls: LogStream, ps: RoundPass, narrow: Narrow) -> Rebuilt:
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
    return Rebuilt(rb, ls.side, ls.summary, ps.checks.result(), ps, has_ms=ls.has_ms,
                   rounds_seen=rebuilder.count + (len(rb.rounds) - len(kept)),
                   logged_seen=ps.logged)  # fmt: skip


def _stop(ps: RoundPass | None, link: Pipes | None) -> None:
    """Stop the second process, whether or not a pass took it on."""
    if ps is not None:
        ps.checks.close()
    elif link is not None:
        link.close()


def _checked(rebuilt: Rebuilt, choice: ProfileChoice) -> Checked:
    """The rebuilt rounds against the continuity of the baseline: the falls the logged
    allocations do not explain, counted into the fidelity."""
    ps = rebuilt.round_pass
    drops = tuple(ps.continuity.drops(rebuilt.rebuild.drops))
    return Checked(rebuilt, choice, drops, rebuilt.fidelity.with_drops(len(drops)),
                   tuple(ps.continuity.notes))  # fmt: skip


def _findings(ran: Ran) -> Findings:
    """The cause catalogue over the forward runs, then the whole-log findings (when the
    pass gathered them)."""
    ps = ran.checked.rebuilt.round_pass
    causes = tuple(find_causes(ran))
    return Findings(causes, ps.checks.finish(ran, _round_seconds(ps.timed)))


def _round_seconds(timed: Timed) -> float:
    """The log's span over its timed rounds (1 s when it times fewer than two)."""
    if timed.count < 2 or timed.last is None or timed.last.time is None or timed.first is None:
        return 1.0
    if timed.last.time <= timed.first:
        return 1.0
    return timed.span() / (timed.count - 1)


def _run_policies(checked: Checked, options: ReplayOptions) -> Runs:
    """Every policy forward from the start round, the observed outside allocations and
    the requests that arrived since replayed where they were seen (facts of the world, not
    decisions); none without a logged round."""
    rb, ps = checked.rebuild, checked.rebuilt.round_pass
    found = _start_round(rb, ps)
    if found is None:
        return Runs()
    start, later, shown = found
    notes: list[str] = []
    readings: dict[str, float] = {}
    timing, inflight, how = _transfer_model(
        checked.rebuilt, start, later, ps, options.transfer_seconds, readings, notes
    )
    transfer = TransferEstimate(timing.transfer_latency_s, how, readings)
    given = _builder(checked, start, timing, inflight, shown, notes)
    anchored = _anchor(rb, start, given, timing, transfer, notes)
    build = anchored.build if anchored is not None else given
    # the code as it ran first: the logs are checked against it
    as_ran = run_shown(build.build(AS_RAN), "policy prefix", MAX_ROUNDS)
    results = {AS_RAN: as_ran} | {
        policy: run_shown(build.build(policy), f"policy {policy}", MAX_ROUNDS)
        for policy in dict.fromkeys(options.policies)
        if policy != AS_RAN
    }
    reproduced: bool | None = None
    holds: dict[str, HoldsFor] = {}
    anchoring = anchored.found if anchored is not None else None
    if rb.oom:
        reproduced = OomFigures.of(rb.oom).met_by(as_ran.oom)
        holds = _sensitivity(rb, build, timing, readings, transfer, anchoring, results)
        if reproduced:
            holds = _unseen_takes(rb, build, start, as_ran, holds)
    observed = OomFigures.of(rb.oom) if rb.oom else None
    costs = cost_readings(build, transfer, results, observed) if options.costs else []
    return Runs(
        start.index, results, reproduced, transfer, build.outside, anchoring, build.hold_until,
        holds, tuple(notes), build, tuple(costs),
    )  # fmt: skip


def _builder(
    checked: Checked, start: Round, timing: Timing, inflight: list[tuple[str, int, float]],
    shown: list[Shown], notes: list[str],
) -> NodeBuilder:  # fmt: skip
    """A fresh node at the start round under a policy, with the observed falls of the
    baseline since, the requests first shown since, the cache that could not be evicted
    and the SWA pool the out-of-memory line shows (each said in ``notes``)."""
    rb = checked.rebuild
    outside = _given(checked.drops, start.index)
    if outside and not anchors(rb, start):
        notes.append(
            "outside allocations replayed under every policy: "
            + ", ".join(f"{t} tokens before round {r}" for r, t in sorted(outside.items()))
            + " (observed falls of the baseline; held to the end of the run)"
        )

    _note_arrivals(shown, start, timing.round_overhead_s, notes)
    stuck = _unevictable(rb, start, notes)
    swa = _swa_pool(rb, start, notes)
    later = (r for r in rb.rounds if r.index > start.index)
    evicted = observed_evictions(start, later, rb.cfg)
    notes.extend(f"observed: {e.sentence()}" for e in evicted)
    return NodeBuilder(
        rb, start, tuple(shown), timing, tuple(inflight), unevictable=stuck,
        swa_pool_size=swa, profile=checked.profile.profile, outside=outside,
        evictions=evicted,
    )  # fmt: skip


class _Anchored(NamedTuple):
    """What anchoring found, and the builder held to it (its events; no transfer ending
    inside the anchored window)."""

    found: Anchoring
    build: NodeBuilder


def _anchor(
    rb: Rebuild, start: Round, build: NodeBuilder, timing: Timing, transfer: TransferEstimate,
    notes: list[str],
) -> _Anchored | None:  # fmt: skip
    """Hold ``prefix`` to every observation from the start round to the out-of-memory:
    the exogenous events they require join the events every policy replays, and no
    transfer ends on the clock inside that window (``anchor``'s note)."""
    marks = anchors(rb, start)
    if not marks:
        return None
    per_round = timing.round_overhead_s
    hold = (marks[-1].round + 1 - start.index) * per_round
    # NOTE: the falls the rebuild inferred inside the window are not taken as given: the
    # anchoring finds every event there from the observations themselves
    node = build.build(AS_RAN, events={}, hold=hold, record=False)
    found = anchor_run(node, marks, evidence_check(rb), start=start.index, page=rb.cfg.page_size)
    held = build.held(found.schedule({}), hold)
    notes.append(
        f"rounds {start.index}..{marks[-1].round} are held to the {len(marks)} observation(s) "
        "in them (logged baselines, the out-of-memory line): no KV transfer ends there "
        "unless one shows it"
    )
    notes.extend(f"observed: {s.sentence()}" for s in found.shifts)
    notes.extend(f"not met: {u.sentence()}" for u in found.unmet)
    _assumption_against_evidence(transfer, held, marks[-1], start, notes)
    return _Anchored(found, held)


def _assumption_against_evidence(
    transfer: TransferEstimate | None, build: NodeBuilder, mark: Anchor, start: Round,
    notes: list[str],
) -> None:  # fmt: skip
    """Say so where the transfer time the replay runs with would free memory inside the
    anchored window that the observations show was not there."""
    node = build.build(AS_RAN, hold=-math.inf, record=False)
    if not isinstance(node.step(), RoundRecord):
        return
    freed = freed_against(node, mark)
    if freed > 0 and transfer is not None:
        notes.append(
            f"contradicted by the evidence: KV transfers of {transfer.seconds:.2f} s "
            f"({transfer.how}) would free {freed} slots by round {mark.round}, where the "
            f"logs show {mark.value} {'available' if mark.kind == 'oom' else 'as its baseline'} "
            f"({mark.where}); inside rounds {start.index}..{mark.round} the "
            "observations decide, the transfer time only after them"
        )


def _sensitivity(
    rb: Rebuild, build: NodeBuilder, timing: Timing, readings: dict[str, float],
    transfer: TransferEstimate | None, found: Anchoring | None, policies: Iterable[str],
) -> dict[str, HoldsFor]:  # fmt: skip
    """Every policy over the transfer times the log allows and the placements of the
    events found between silent rounds (``holds``)."""
    lower = readings.get(LOWER_BOUND)
    chosen = transfer.seconds if transfer else timing.transfer_latency_s
    seconds = tried_seconds(chosen, readings, lower)
    picks: list[Pick] = [(0, False, 0, 0, False)]
    if found is not None and found.variants() > 1:
        picks.append((-1, False, 0, 0, False))
    if found is not None and found.saturated():
        picks += [(p, True, 0, 0, False) for p, _, _, _, _ in picks]
    # NOTE: the events are placed by round under prefix, whose rounds the logs show; under
    # another policy the rounds run differently, and the time each event happened may
    # fall a round either side. So may the time the anchored window ends (the logged
    # crash's), before which no transfer ended.
    moved = picks + [(p, m, o, 0, False) for p, m, _, _, _ in picks for o in (-1, 1)]
    held = [(0, False, 0, h, False) for h in (-1, 1)] if math.isfinite(build.hold_until) else []
    if found is not None and _swap_meets(rb, build, found):
        held.append((0, False, 0, 0, True))
    pool, per_round = rb.cfg.pool_size, timing.round_overhead_s

    def run(policy: str) -> Callable[[float, int, bool, int, int, bool], bool]:
        def one(sec: float, pick: int, most: bool, offset: int, hold: int, swap: bool) -> bool:
            events: Mapping[int, int] = (
                build.outside
                if found is None
                else found.schedule({}, pick, pool * most, offset, swap)
            )
            until = build.hold_until + hold * per_round if hold else None
            node = build.build(policy, seconds=sec, events=events, hold=until, record=False)
            return node.run(MAX_ROUNDS).oom is not None

        return one

    allowed = (lower if lower is not None else min(seconds), None)
    events = found is not None and bool(found.shifts)
    holds: dict[str, HoldsFor] = {}
    for policy in policies:
        mine = (moved if events else picks) + held if policy != AS_RAN else picks
        holds[policy] = holds_for(policy, run(policy), seconds, mine, allowed)
    return holds


def _swap_meets(rb: Rebuild, build: NodeBuilder, found: Anchoring) -> bool:
    """Whether more memory back and the difference taken before the crash round
    (``Anchoring.can_swap``) is an account of the logs too: under ``prefix`` it runs
    out exactly as the logged out-of-memory does."""
    if rb.oom is None or not found.can_swap():
        return False
    node = build.build(AS_RAN, events=found.schedule({}, swap=True), record=False)
    return OomFigures.of(rb.oom).met_by(node.run(MAX_ROUNDS).oom)


def _unseen_takes(
    rb: Rebuild, build: NodeBuilder, start: Round, as_ran: RunResult, holds: dict[str, HoldsFor],
) -> dict[str, HoldsFor]:  # fmt: skip
    """Each "no out of memory" with the least take outside the adder, made where the logs
    could not show one (``unseen``), that undoes it. Only where ``prefix`` reproduces
    the logged rounds: its run (``as_ran``) is what says where the logged pool had nothing
    free."""
    assert rb.oom is not None and rb.oom.round is not None
    page, pool = rb.cfg.page_size, rb.cfg.pool_size
    blind = blind_rounds(as_ran.rounds, start.index, rb.oom.round, page)
    out = dict(holds)
    for policy, h in holds.items():
        if policy == AS_RAN or h.answer != "no out of memory" or not blind:
            continue

        def runs_out(before: int, slots: int, policy: str = policy) -> bool:
            events = dict(build.outside)
            events[before] = events.get(before, 0) + slots
            return build.build(policy, events=events, record=False).run(MAX_ROUNDS).oom is not None

        out[policy] = replace(h, unseen=least_take(runs_out, blind, pool=pool, page=page,
                                                   first=start.index + 1))  # fmt: skip
    return out


def _given(drops: Sequence[Drop], start_round: int) -> dict[int, int]:
    """The events before anchoring: the observed falls of the baseline."""
    return {d.before_round: d.tokens for d in drops if d.before_round > start_round}


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
    rr: Rebuilt,
    start: Round,
    later: Timed,
    ps: RoundPass,
    seconds: float | None,
    readings: dict[str, float],
    notes: list[str],
) -> tuple[Timing, list[tuple[str, int, float]], str]:
    """Rounds last as long as the log says; KV transfers release memory after ``seconds``
    (returned with how that was arrived at; the other readings go into ``readings``, what
    it assumes into ``notes``).

    The memory held at the start round (pool - baseline) belongs to requests whose KV is
    being sent; the batch lines' ``#inflight-req`` says how many. With no frees observed
    until the crash, no transfer ended before it: that bounds the transfer time from below.
    """
    rb = rr.rebuild
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
        # NOTE: whole-second stamps floor both ends of the span: the rounds may have taken
        # up to a second less than the printed times say, and so may the transfers
        # With millisecond stamps the window is the span itself: a transfer in flight at
        # the start round began before it, so none ending before the crash bounds its
        # time by the span from the start round's check to the crash, and no further.
        readings[LOWER_BOUND] = span if rr.has_ms else max(bound - 1.0, per_round)
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
    batch = start.batch
    if batch is not None and batch.inflight_req is not None:
        # The batch line is printed after the round's forward: the requests that finished
        # in that round are already counted, so take them out again.
        finished = sum(1 for d in start.decisions if d.decision == "full")
        count = max(1, int(batch.inflight_req) - finished)
        source = (
            f"{batch.where} #inflight-req: {batch.inflight_req} "
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
    "LOWER_BOUND",
    "MAX_ROUNDS",
    "WINDOW",
    "NoAdderLines",
    "NodeBuilder",
    "Prov",
    "ReplayOptions",
    "ReplayResult",
    "TransferEstimate",
    "replay_logs",
]
