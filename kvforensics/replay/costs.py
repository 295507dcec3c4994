"""What a fix costs, and how much that depends on the KV transfer time.

The first-token delay a fix adds is paid waiting for memory that finishing KV transfers
give back, so it moves with the transfer time. The log supports several readings of that
time (`TransferEstimate.alternatives`); each is re-run here under ``prefix`` and the other
policies. A reading under which ``prefix`` no longer runs out of memory as logged, or
that is shorter than the log's lower bound (no transfer ended before the crash, though the
forward runs, held to the observations there, still reproduce it), is contradicted by the
log itself, and is marked so."""

from __future__ import annotations

from dataclasses import dataclass

from kvforensics.model import OutOfMemory
from kvforensics.replay.replay import LOWER_BOUND, MAX_ROUNDS, ReplayResult
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


def _same_oom(rr: ReplayResult, got: OutOfMemory | None) -> bool | None:
    o = rr.observed_oom
    if o is None:
        return None
    return got is not None and (got.round, got.rid, got.tokens, got.available) == (
        o.round,
        o.rid,
        o.tokens,
        o.available,
    )


def _fits(rr: ReplayResult, got: OutOfMemory | None, seconds: float) -> bool | None:
    same = _same_oom(rr, got)
    lower = rr.transfer.alternatives.get(LOWER_BOUND) if rr.transfer else None
    return same if same is None or lower is None else same and seconds >= lower


def cost_readings(rr: ReplayResult, policies: list[str]) -> list[CostReading]:
    """The run as replayed, then one re-run per other reading of the transfer time."""
    if rr.transfer is None or rr.build_node is None:
        return []
    used = rr.transfer.seconds
    seen = {round(used, 6)}
    readings = [(f"used ({rr.transfer.how})", used, True)]
    for label, s in rr.transfer.alternatives.items():
        if round(s, 6) not in seen:
            seen.add(round(s, 6))
            readings.append((label, s, False))
    out = []
    for label, seconds, is_used in readings:
        runs = {
            p: rr.results[p] if is_used and p in rr.results else
            rr.build_node(p, seconds).run(max_rounds=MAX_ROUNDS)
            for p in dict.fromkeys(["prefix", *policies])
        }  # fmt: skip
        base = runs["prefix"]
        out.append(
            CostReading(
                label=label,
                seconds=seconds,
                used=is_used,
                reproduces=_fits(rr, base.oom, seconds),
                ooms={
                    p: (r.oom.round, r.oom.rid, r.oom.tokens) if r.oom else None
                    for p, r in runs.items()
                },
                delays={
                    p: [d for d in first_token_delays(base, r) if d.delay_s or d.note]
                    for p, r in runs.items()
                    if p != "prefix"
                },
            )
        )
    return out
