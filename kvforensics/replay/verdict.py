"""The verdict in numbers and in words: who lost its tail, who took it, through which gap."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvforensics.causes import IDS, Cause, in_order
from kvforensics.causes.oom import OomFigures, oom_words
from kvforensics.causes.tail import RootCause, root_cause
from kvforensics.causes.tail import story as tail_story
from kvforensics.model import RunResult
from kvforensics.model.policies import AS_RAN
from kvforensics.replay.holds import HoldsFor

__all__ = ["FirstTokenDelay", "first_token_delays", "root_cause", "verdict_text"]


@dataclass(frozen=True, slots=True)
class FirstTokenDelay:
    """When one request's prefill finished under a policy and under ``prefix``, and how
    much later (None when either run never finished it; ``note`` says why)."""

    rid: str
    finished_round: int | None
    base_finished_round: int | None
    delay_s: float | None
    note: str | None

    def as_dict(self) -> dict[str, object]:
        return {
            "rid": self.rid,
            "finished_round": self.finished_round,
            "base_finished_round": self.base_finished_round,
            "delay_s": self.delay_s,
            "note": self.note,
        }


def first_token_delays(base: RunResult, other: RunResult) -> list[FirstTokenDelay]:
    """Per request: when its prefill finished under each policy, and the difference."""
    out = []
    for rid, req in other.requests.items():
        b = base.requests.get(rid)
        t_other = req.finished_time
        t_base = b.finished_time if b else None
        out.append(
            FirstTokenDelay(
                rid=rid,
                finished_round=req.finished_round,
                base_finished_round=b.finished_round if b else None,
                delay_s=round(t_other - t_base, 3)
                if t_other is not None and t_base is not None
                else None,
                note=None if t_base is not None else "never finished under prefix (it crashed first)",
            )
        )
    return sorted(out, key=lambda d: d.rid)


def verdict_text(
    rc: RootCause | None,
    observed: OomFigures | None,
    results: dict[str, Any],
    causes: Sequence[Cause] | None = None,
    holds: dict[str, HoldsFor] | None = None,
) -> list[str]:
    """The verdict in words: the held causes' stories in order of events, then each
    policy's outcome, and how far it holds over the unobserved (``holds``). Without
    ``causes`` only the ``unreserved_tail`` story (``rc``) is told."""
    if not observed and rc is None:
        return ["No out of memory in these logs."]
    if causes is None:
        held = [] if rc is None else [c for c in [_tail_only(rc)] if c.held]
    else:
        held = in_order(causes)
    lines = [line for c in held for line in c.story]
    if not held and observed:
        lines.append(
            f"No known cause explains the out-of-memory in round {observed.round} "
            f"({observed.rid}, {oom_words(observed.tokens, observed.available)}): "
            f"none of {', '.join(IDS)} holds on this "
            "evidence."
        )
    pre = results.get(AS_RAN)
    if observed and (pre is None or pre.oom is None):
        lines.append(
            "The logged out-of-memory was not reproduced by the prefix model; see the "
            "fidelity section."
        )
    if pre is None or pre.oom is None:
        return lines
    for name, res in results.items():
        if name == AS_RAN:
            continue
        h = (holds or {}).get(name)
        lines.append(
            f"Under {name}: "
            + (
                "no out of memory"
                if res.oom is None
                else f"out of memory in round {res.oom.round} ({res.oom.rid}, {res.oom.tokens} tokens)"
            )
            + (f"; {h.sentence()}." if h is not None else ".")
        )
    return lines


def _tail_only(rc: RootCause) -> Cause:
    return Cause("unreserved_tail", bool(rc.intruder_rid), "", round=rc.round,
                 story=tail_story(rc))
