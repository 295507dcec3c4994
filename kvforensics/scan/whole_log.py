"""The whole log, round by round: every rebuilt round re-run under ``prefix`` from its own
rebuilt state (as the fidelity check does), then read off the model's ledger: admissions
through a gap, the margin each round left, and what a fix would have refused.

Nothing here sizes a piece or checks memory: those numbers are the ledger's fields, so the
adder's arithmetic stays in ``kvforensics.model``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kvforensics.model import POLICIES, OutOfMemory, Timing
from kvforensics.model.ledger import NAMES
from kvforensics.replay.state import node_at
from kvforensics.replay.verdict import first_token_delays
from kvforensics.rounds import Rebuild, Round
from kvforensics.scan.records import GapAdmission, Margin, Refusal, WholeLog

#: the fixes whose refusals are counted, when the model has them
FIXES = ("fixed", "park")
ADDER_CALLS = ("add_one_req", "add_chunked_req")
ADMITTED = ("full", "truncated")
#: a forward run to measure a refused request's delay stops here
FORWARD_ROUNDS = 1_000
#: margins kept per node: the lowest of each stretch of rounds (the result stays small)
MARGIN_POINTS = 256


@dataclass(slots=True)
class _Rerun:
    """One round re-run under one policy: its ledger rows by name and the outcome."""

    rows: list[dict]
    oom: OutOfMemory | None

    def adder(self) -> list[dict]:
        return [r for r in self.rows if r["call"] in ADDER_CALLS]

    def admitted(self) -> list[str]:
        return [r["rid"] for r in self.adder() if r["decision"] in ADMITTED]


def rerun(rb: Rebuild, rnd: Round, policy: str) -> _Rerun:
    node = node_at(rb, rnd, policy)
    out = node.step()
    rows = [dict(zip(NAMES, row, strict=False)) for row in node.ledger.rows]
    return _Rerun(rows, out if isinstance(out, OutOfMemory) else None)


def replayable(rb: Rebuild) -> Iterator[Round]:
    """Rounds with a rebuilt baseline and something to run (logged or inferred)."""
    for rnd in rb.rounds:
        has_base = rnd.baseline is not None and rnd.baseline.value is not None
        if has_base and (rnd.decisions or rnd.pieces):
            yield rnd


def _unreserved(row: dict) -> int:
    """The tail a truncation left for later rounds when no one reserved it, else 0."""
    if row["decision"] not in ("truncated", "resumed") or row["end"] is None:
        return 0
    tail = row["seq_len"] - row["end"]
    return tail if tail > 0 and not row["reserved_tail"] else 0


def gap_admissions(run: _Rerun, rnd: Round) -> list[GapAdmission]:
    """Every admission after an unreserved truncation of the same round that left budget."""
    out, victim = [], None
    when = _time(rnd)
    for row in run.adder():
        if victim is not None and row["decision"] in ADMITTED:
            out.append(
                GapAdmission(
                    round=rnd.index,
                    time=when,
                    victim_rid=victim["rid"],
                    unreserved_tail=_unreserved(victim),
                    intruder_rid=row["rid"],
                    intruder_compute=row["end"] - row["start"],
                    intruder_load_back=row["load_back"] or 0,
                    rem_total_tokens=row["rem_total_tokens"],
                    leftover_chunk_budget=victim["rem_chunk_after"],
                )
            )
        if _unreserved(row) and (row["rem_chunk_after"] or 0) > 0:
            victim = row
    return out


def margin(run: _Rerun, rnd: Round) -> Margin | None:
    """What the round left minus the tails it promised to nobody."""
    tails = sum(_unreserved(r) for r in run.adder())
    if run.oom is not None:
        left = run.oom.available - run.oom.tokens
        return Margin(rnd.index, _time(rnd), left, tails, left - tails, oom=True)
    allocs = [r for r in run.rows if r["call"] == "allocate"]
    if not allocs:
        return None
    left = allocs[-1]["baseline_after"]
    return Margin(rnd.index, _time(rnd), left, tails, left - tails)


def _fix_may_differ(run: _Rerun) -> bool:
    """A fix's hooks act after a truncation or on a forced resume; elsewhere its round is
    the prefix round, so it is not re-run."""
    return any(_unreserved(r) or r["forced"] for r in run.adder())


def whole_log(rr) -> WholeLog:
    """``rr``: a ``replay.ReplayResult``. Its start-round runs give the delays there."""
    rb = rr.rebuild
    fixes = [p for p in FIXES if p in POLICIES]
    gaps, margins, n = [], [], 0
    refused: dict[str, list[tuple[Round, str]]] = {p: [] for p in fixes}
    for rnd in replayable(rb):
        n += 1
        run = rerun(rb, rnd, "prefix")
        gaps.extend(gap_admissions(run, rnd))
        m = margin(run, rnd)
        if m is not None:
            margins.append(m)
        if not _fix_may_differ(run):
            continue
        for policy in fixes:
            kept = set(rerun(rb, rnd, policy).admitted())
            refused[policy].extend((rnd, rid) for rid in run.admitted() if rid not in kept)
    notes: list[str] = []
    delays = {p: _delays(rr, p, refused[p], notes) for p in fixes}
    return WholeLog(
        tuple(gaps), lowest_per_stretch(margins), delays, n, tuple(dict.fromkeys(notes))
    )


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


def _delays(
    rr, policy: str, refused: list[tuple[Round, str]], notes: list[str]
) -> tuple[Refusal, ...]:
    """First-token delay of each refused request: at the replay's start round from its own
    runs (with its transfer model); elsewhere from both policies run forward from the
    round's rebuilt state."""
    if not refused:
        return ()
    out = []
    by_round: dict[int, tuple[Round, list[str]]] = {}
    for rnd, rid in refused:
        by_round.setdefault(rnd.index, (rnd, []))[1].append(rid)
    for index, (rnd, rids) in by_round.items():
        base, other = _runs(rr, rnd, policy, notes)
        table = {d["rid"]: d["delay_s"] for d in first_token_delays(base, other)}
        out.extend(Refusal(index, rid, table.get(rid)) for rid in rids)
    return tuple(out)


def _runs(rr, rnd: Round, policy: str, notes: list[str]):
    if rnd.index == rr.start_round and "prefix" in rr.results and policy in rr.results:
        return rr.results["prefix"], rr.results[policy]
    per_round = round_seconds(rr.rebuild)
    notes.append(
        f"first-token delays under {policy} outside the replay's own runs: prefix and "
        f"{policy} run forward from that round's rebuilt state, a round lasting {per_round:.2f} s "
        "(derived: the log's span over its rounds), finished requests' memory free at once, "
        "the memory held outside the round's queue held throughout (assumed)"
    )
    timing = Timing(round_overhead_s=per_round)
    return tuple(
        node_at(rr.rebuild, rnd, p, timing=timing).run(max_rounds=FORWARD_ROUNDS)
        for p in ("prefix", policy)
    )


def round_seconds(rb: Rebuild) -> float:
    timed = [r.time for r in rb.rounds if r.time is not None]
    if len(timed) < 2 or timed[-1] <= timed[0]:
        return 1.0
    return (timed[-1] - timed[0]).total_seconds() / (len(timed) - 1)


def _time(rnd: Round) -> str | None:
    return rnd.time.isoformat(sep=" ") if rnd.time is not None else None
