"""What a fix costs, and how much that depends on the KV transfer time.

The first-token delay a fix adds is paid waiting for memory that finishing KV transfers
give back, so it moves with the transfer time. The log supports several readings of that
time (`TransferEstimate.alternatives`); each is re-run here under ``prefix`` and the other
policies. A reading under which ``prefix`` no longer runs out of memory as logged, or
that is shorter than the log's lower bound (no transfer ended before the crash, though the
forward runs, held to the observations there, still reproduce it), is contradicted by the
log itself, and is marked so."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvforensics.causes.oom import OomFigures
from kvforensics.model import OutOfMemory, RunResult
from kvforensics.model.policies import AS_RAN
from kvforensics.replay.forward import LOWER_BOUND, MAX_ROUNDS, NodeBuilder, TransferEstimate
from kvforensics.replay.verdict import FirstTokenDelay, first_token_delays


@dataclass(frozen=True, slots=True)
class CostReading:
    label: str
    seconds: float
    used: bool  # the transfer time the replay ran with
    #: None without a logged out-of-memory; else whether ``prefix`` reproduces it
    reproduces: bool | None
    ooms: dict[str, tuple[int, str, int] | None]  # policy -> (round, rid, tokens)
    delays: dict[str, list[FirstTokenDelay]]  # policy -> requests whose first token moved


def _same_oom(observed: OomFigures | None, got: OutOfMemory | None) -> bool | None:
    return None if observed is None else observed.met_by(got)


def _fits(
    observed: OomFigures | None, transfer: TransferEstimate, got: OutOfMemory | None,
    seconds: float,
) -> bool | None:  # fmt: skip
    same = _same_oom(observed, got)
    lower = transfer.alternatives.get(LOWER_BOUND)
    return same if same is None or lower is None else same and seconds >= lower


def cost_readings(
    build: NodeBuilder, transfer: TransferEstimate, results: Mapping[str, RunResult],
    observed: OomFigures | None,
) -> list[CostReading]:  # fmt: skip
    """The runs as replayed (``results``: ``prefix`` and the other policies, from
    ``build``), then one re-run of each per other reading of the transfer time
    (``observed``: the logged out-of-memory)."""
    used = transfer.seconds
    seen = {round(used, 6)}
    readings = [(f"used ({transfer.how})", used, True)]
    for label, s in transfer.alternatives.items():
        if round(s, 6) not in seen:
            seen.add(round(s, 6))
            readings.append((label, s, False))
    out = []
    for label, seconds, is_used in readings:
        runs = {
            p: results[p] if is_used else
            build.build(p, seconds=seconds).run(max_rounds=MAX_ROUNDS)
            for p in results
        }  # fmt: skip
        base = runs[AS_RAN]
        out.append(
            CostReading(
                label=label,
                seconds=seconds,
                used=is_used,
                reproduces=_fits(observed, transfer, base.oom, seconds),
                ooms={
                    p: (r.oom.round, r.oom.rid, r.oom.tokens) if r.oom else None
                    for p, r in runs.items()
                },
                delays={
                    p: [d for d in first_token_delays(base, r) if d.delay_s or d.note]
                    for p, r in runs.items()
                    if p != AS_RAN
                },
            )
        )
    return out
