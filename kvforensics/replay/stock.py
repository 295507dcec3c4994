"""What a stock SGLang log (no PrefillAdder lines) can tell about an out-of-memory.

Most deployments run a release: their logs have the startup lines, the batch lines and
the crash, but nothing per request. Those still say which out-of-memory happened and by
which mechanism (the message's pool arithmetic, `causes.arithmetic`), what kind of node
it was, how large the pool was, how the batches ran up to it, and how many retractions
and other crashes there were. They cannot say what the adder decided: that needs the
fork's lines, which are named once, from the catalogue.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, cast

import polars as pl

from kvforensics.causes.arithmetic import OomArithmetic, PoolReading, classify
from kvforensics.clip import clip
from kvforensics.errors import InputError
from kvforensics.logs import ParseSummary
from kvforensics.logs.forms import Catalogue
from kvforensics.replay.profile_choice import ProfileChoice
from kvforensics.replay.stock_trend import BatchTrend, batch_trend
from kvforensics.rounds.provenance import DERIVED, GIVEN, OBSERVED, Prov, where

#: token usage is printed with two decimals: the true ratio is within this of the print
USAGE_HALF_STEP = 0.005
#: prefill-line fields only a PD prefill node prints (bootstrap, KV transfer)
PD_PREFILL_FIELDS = ("transferring_req", "unbootstrapped_req", "bootstrap_req", "inflight_req")
POOLS = (("full", ""), ("swa", "swa_"), ("mamba", "mamba_"))


@dataclass(frozen=True)
class ObservedOom:
    """One out-of-memory message, its numbers and what they show."""

    phase: str | None
    tokens: int | None
    readings: tuple[PoolReading, ...]
    arithmetic: OomArithmetic
    time: str | None
    rank: str
    where: str
    exception: str | None = None

    @property
    def full(self) -> PoolReading:
        """The full pool's reading (the first the message prints); empty when none."""
        return self.readings[0] if self.readings else PoolReading("full")

    def as_dict(self) -> dict[str, Any]:
        full = self.full
        return {
            "phase": self.phase,
            "pool": self.arithmetic.pool,
            "tokens": self.tokens,
            "available": full.available,
            "free": full.free,
            "evictable": full.evictable,
            "pools": {
                r.pool: {"available": r.available, "free": r.free, "evictable": r.evictable}
                for r in self.readings
            },
            "time": self.time,
            "rank": self.rank,
            "where": self.where,
            "mechanism": str(self.arithmetic.mechanism),
            "reason": self.arithmetic.reason,
        }


@dataclass(frozen=True)
class NodeKind:
    kind: str  # pd_prefill | decode | colocated | prefill | unknown
    evidence: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "evidence": self.evidence}


@dataclass(frozen=True, slots=True)
class Retractions:
    """The retract lines (decode sending requests back to the queue, not a crash)."""

    count: int = 0
    #: requests sent back, when the lines print how many
    requests: int | None = None
    ranks: tuple[str, ...] = ()
    first: str | None = None
    last: str | None = None
    last_new_token_ratio: float | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "count": self.count,
            "requests": self.requests,
            "ranks": list(self.ranks),
            "first": self.first,
            "last": self.last,
        }
        # the ratio is a retract line's, so it has a key only when there is one
        if self.count:
            out["last_new_token_ratio"] = self.last_new_token_ratio
        return out


@dataclass(frozen=True, slots=True)
class Crash:
    """A crash other than the KV pool's out-of-memory (those are ``ObservedOom``s)."""

    kind: str  # a key of CRASH_KINDS
    #: the allocator of a device out-of-memory (CUDA, NPU, Triton, ...)
    device: str | None
    time: str | None
    rank: str
    where: str
    #: the exception line, or the signal's; None when neither is in the log
    exception: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "device": self.device,
            "time": self.time,
            "rank": self.rank,
            "where": self.where,
            "exception": self.exception,
        }


@dataclass(frozen=True, slots=True)
class StockContradiction:
    """Lines that cannot all be true (a stock log has no round to pin it to)."""

    what: str
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"what": self.what, "detail": self.detail}


@dataclass
class StockAnalysis:
    summary: ParseSummary
    node: NodeKind
    pool: Prov
    chunk_size: Prov | None
    ooms: list[ObservedOom]
    retractions: Retractions
    crashes: tuple[Crash, ...]
    trend: BatchTrend
    needed_lines: list[str]
    contradictions: list[StockContradiction] = field(default_factory=list)
    #: the release the lines tell and the profile it names (``replay/profile_choice.py``)
    profile: ProfileChoice | None = None

    mode = "stock"

    @property
    def fatal(self) -> ObservedOom | None:
        """The last out-of-memory in the logs: the one the server went down with."""
        return self.ooms[-1] if self.ooms else None

    def exit_code(self) -> int:
        """0, or 3 when the lines contradict each other (as for a fork's log)."""
        return 3 if self.contradictions else 0

    def as_dict(self) -> dict[str, Any]:
        fatal = self.fatal.as_dict() if self.fatal else None
        return {
            "mode": self.mode,
            "log": self.summary.to_dict(),
            "node": self.node.as_dict(),
            "pool_size": self.pool.as_dict(),
            "chunk_size": self.chunk_size.as_dict() if self.chunk_size else None,
            "observed_oom": fatal,
            "observed_ooms": [o.as_dict() for o in self.ooms],
            "retractions": self.retractions.as_dict(),
            "crashes": [c.as_dict() for c in self.crashes],
            "batch_trend": self.trend.as_dict(),
            "not_rebuilt": NOT_REBUILT,
            "needed_lines": self.needed_lines,
            "contradictions": [c.as_dict() for c in self.contradictions],
            "profile": self.profile.as_dict() if self.profile else None,
        }


NOT_REBUILT = (
    "Without PrefillAdder lines the rounds cannot be rebuilt request by request: which "
    "requests each round admitted, truncated or rejected, the adder's budget before each "
    "decision, the host load-backs and the pieces of a chunked request are not in the log, "
    "so no policy can be re-run and no round-level cause named."
)


def _time_of_row(ev: dict[str, Any]) -> str | None:
    if ev.get("time") is not None:
        return str(ev["time"].isoformat(sep=" "))
    return str(ev["clock"].isoformat()) if ev.get("clock") is not None else None


def _readings_of_row(ev: dict[str, Any]) -> tuple[PoolReading, ...]:
    out = []
    for pool, p in POOLS:
        r = PoolReading(
            pool,
            ev.get(f"oom_{p}available"),
            ev.get(f"oom_{p}available_size"),
            ev.get(f"oom_{p}evictable_size"),
        )
        if pool == "full" or (r.available, r.free, r.evictable) != (None, None, None):
            out.append(r)
    return tuple(out)


def _oom_from_row(ev: dict[str, Any]) -> ObservedOom:
    """An ``oom`` event's row: the message's numbers, and the mechanism they show."""
    readings = _readings_of_row(ev)
    full = readings[0]
    has_numbers = (full.available, full.free, full.evictable) != (None, None, None)
    arith = classify(ev.get("oom_tokens"), list(readings) if has_numbers else [])
    return ObservedOom(
        ev.get("oom_phase"),
        ev.get("oom_tokens"),
        readings,
        arith,
        _time_of_row(ev),
        ev["rank"],
        where(ev),
        ev.get("exception"),
    )


def observed_ooms(events: pl.DataFrame) -> list[ObservedOom]:
    return [_oom_from_row(ev) for ev in _kinds(events, "oom").iter_rows(named=True)]


def _kinds(events: pl.DataFrame, kind: str) -> pl.DataFrame:
    return events.filter(pl.col("kind") == kind)


def node_kind(events: pl.DataFrame) -> NodeKind:
    """PD prefill, decode or colocated, from what the lines print."""
    args = _kinds(events, "server_args")
    if "disaggregation_mode" in events.columns:
        modes = args.filter(pl.col("disaggregation_mode").is_not_null())
        if modes.height:
            ev = modes.row(modes.height - 1, named=True)
            mode = ev["disaggregation_mode"]
            if mode in ("prefill", "decode"):
                kind = "pd_prefill" if mode == "prefill" else "decode"
                return NodeKind(kind, [f"{where(ev)} disaggregation_mode='{mode}'"])
    prefill, decode = _kinds(events, "prefill_batch"), _kinds(events, "decode_batch")
    pd = [c for c in PD_PREFILL_FIELDS if c in prefill.columns and prefill[c].is_not_null().any()]
    if pd:
        ev = prefill.filter(pl.col(pd[0]).is_not_null()).row(0, named=True)
        return NodeKind(
            "pd_prefill", [f"{where(ev)} prints {pd[0].replace('_', '-')} (PD prefill)"]
        )
    ooms = _kinds(events, "oom")
    phases = set(ooms["oom_phase"].drop_nulls().to_list()) if ooms.height else set()
    decoding = decode.height + _kinds(events, "retract").height + ("Decode" in phases)
    prefilling = prefill.height + ("Prefill" in phases)
    told = [
        f"{n} {what}"
        for n, what in (
            (prefill.height, "Prefill batch line(s)"),
            (decode.height, "Decode batch line(s)"),
            (_kinds(events, "retract").height, "retraction(s)"),
        )
        if n
    ]
    told += [f"a {p} out-of-memory" for p in sorted(phases)]
    if decoding and prefilling:
        return NodeKind("colocated", told)
    if decoding:
        return NodeKind("decode", told)
    if prefilling:
        return NodeKind("prefill", [*told, "no PD field, no decode line"])
    return NodeKind("unknown", ["no batch line and no out-of-memory with a phase"])


def pool_size(events: pl.DataFrame, given: int | None, notes: list[StockContradiction]) -> Prov:
    """max_total_num_tokens from the startup line (or the flag), else bounded by the
    decode lines: `#token` used at `token usage` printed with two decimals."""
    bounds = _pool_bounds(events)
    if given is not None:
        return Prov(given, GIVEN, ["--pool-size"], bounds[:2] if bounds else None)
    mem = _kinds(events, "memory_config")
    if "max_total_num_tokens" in events.columns:
        mem = mem.filter(pl.col("max_total_num_tokens").is_not_null())
    if mem.height:
        ev = mem.row(mem.height - 1, named=True)
        value = int(ev["max_total_num_tokens"])
        if bounds and not bounds[0] <= value <= bounds[1]:
            notes.append(
                StockContradiction(
                    "pool size",
                    f"{where(ev)} max_total_num_tokens="
                    f"{value} but the decode lines bound it to [{bounds[0]}, {bounds[1]}]",
                )
            )
        return Prov(value, OBSERVED, [where(ev)])
    if bounds is None:
        return Prov(None, "unknown", ["no startup line and no Decode batch line with #token"])
    lo, hi, n = bounds
    if lo > hi:
        notes.append(
            StockContradiction(
                "pool size",
                f"{n} decode lines disagree: no pool size "
                f"gives all their token usages (lower bound {lo} > upper {hi})",
            )
        )
        return Prov(None, DERIVED, [f"{n} Decode batch lines disagree"])
    exact = lo if lo == hi else None
    why = f"{n} Decode batch line(s): #token / (token usage +- {USAGE_HALF_STEP})"
    return Prov(exact, DERIVED, [why], (lo, hi))


def _pool_bounds(events: pl.DataFrame) -> tuple[int, int, int] | None:
    if not {"num_token", "token_usage"} <= set(events.columns):
        return None
    d = _kinds(events, "decode_batch").filter(
        pl.col("num_token").is_not_null()
        & (pl.col("num_token") > 0)
        & pl.col("token_usage").is_not_null()
    )
    if not d.height:
        return None
    t, u = d["num_token"].cast(pl.Float64), d["token_usage"]
    # (polars types a Series' max and min as any literal: these are floats)
    lo = cast(float, (t / (u + USAGE_HALF_STEP)).max())
    above = u > USAGE_HALF_STEP
    hi = (
        cast(float, (t.filter(above) / (u.filter(above) - USAGE_HALF_STEP)).min())
        if above.any()
        else None
    )
    upper = math.floor(hi + 1e-9) if hi is not None else 2**62
    return math.ceil(lo - 1e-9), upper, d.height


def retractions(events: pl.DataFrame) -> Retractions:
    r = _kinds(events, "retract")
    if not r.height:
        return Retractions()
    rows = r.to_dicts()
    told = r["retracted_reqs"].is_not_null().any()
    return Retractions(
        count=r.height,
        requests=int(r["retracted_reqs"].sum()) if told else None,
        ranks=tuple(sorted({x["rank"] for x in rows if x["rank"]})),
        first=where(rows[0]),
        last=where(rows[-1]),
        last_new_token_ratio=rows[-1].get("new_token_ratio_to"),
    )


#: a device allocator's out-of-memory (not the KV pool's), and the allocator it names
DEVICE_OOM = (
    (re.compile(r"\b(CUDA|NPU|HIP|XPU|MUSA) out of memory\. Tried to allocate"), None),
    (re.compile(r"\b(CUDA) error: out of memory"), None),
    (re.compile(r"OutOfResources: out of resource"), "Triton"),
    (re.compile(r"RESOURCE_EXHAUSTED: Out of memory while trying to allocate"), "XLA"),
    (re.compile(r"OutOfMemoryError"), "CUDA"),
)
CRASH_KINDS = {
    "device_oom": "a device allocator out of memory, not the KV pool",
    "signal": "killed or signalled, no report of its own",
    "req_slots": "the request-slot pool (--max-running-requests), not the KV pool",
    "exception": "an exception",
}


def crash_kind(signal: str | None, exception: str | None) -> tuple[str, str | None]:
    """(kind, device allocator) of a crash event, from its signal line and its exception
    line: a signal or kill, a device allocator's out-of-memory, the request-slot pool's,
    or another exception. KV-pool out-of-memories are `oom` events, never crashes."""
    if signal:
        return "signal", None
    text = exception or ""
    for rx, device in DEVICE_OOM:
        m = rx.search(text)
        if m:
            return "device_oom", device or m.group(1)
    if "alloc_req_slots runs out of memory" in text:
        return "req_slots", None
    return "exception", None


def _crash_from_row(ev: dict[str, Any]) -> Crash:
    signal, exception = ev.get("crash_signal"), ev.get("exception")
    kind, device = crash_kind(signal, exception)
    return Crash(kind, device, _time_of_row(ev), ev["rank"], where(ev), exception or signal)


def crashes(events: pl.DataFrame) -> tuple[Crash, ...]:
    return tuple(_crash_from_row(ev) for ev in _kinds(events, "crash").iter_rows(named=True))


#: the adder lines a rebuild cannot do without; the fork's other lines refine it
REQUIRED = ("adder_check", "adder_result")


def needed_lines(cat: Catalogue) -> list[str]:
    """The fork's lines a rebuild needs, as the catalogue spells them (its own wording
    when a --formats file replaces them)."""
    fork = [f for f in cat.formats if f.kind in REQUIRED or f.source.endswith("fork.toml")]
    return [
        f"`{(f.literal or f.regex).strip()}` ({'needed' if f.kind in REQUIRED else 'used when printed'})"
        for f in fork
    ]


def _check_against_ooms(
    pool: Prov, ooms: list[ObservedOom], notes: list[StockContradiction]
) -> Prov:
    """Free + evictable of the full pool never exceeds the pool: above it is a
    contradiction; with no size known, the largest is a lower bound."""
    seen = [(t, o.where) for o in ooms if (t := o.readings[0].total()) is not None]
    if not seen:
        return pool
    most, at = max(seen)
    hi = pool.value if pool.value is not None else (pool.interval[1] if pool.interval else None)
    if hi is not None and most > hi:
        notes.append(
            StockContradiction(
                "pool size",
                f"{at} has {most} free + evictable "
                f"tokens in the full pool, more than the pool's {hi}",
            )
        )
    if pool.value is None and pool.interval is None:
        why = f"{at}: {most} free + evictable tokens in the full pool"
        return Prov(None, DERIVED, [why], (most, 2**62))
    return pool


def _chunk_size(events: pl.DataFrame, given: int | None) -> Prov | None:
    if given is not None:
        return Prov(given, GIVEN, ["--chunk-size"])
    for kind in ("memory_config", "server_args"):
        if "chunked_prefill_size" not in events.columns:
            return None
        rows = _kinds(events, kind).filter(pl.col("chunked_prefill_size").is_not_null())
        if rows.height:
            ev = rows.row(rows.height - 1, named=True)
            return Prov(int(ev["chunked_prefill_size"]), OBSERVED, [where(ev)])
    return None


def require_scheduler_log(summary: ParseSummary) -> None:
    """Refuse files with no scheduler message, saying what they hold instead."""
    if not summary.scheduler_log:
        seen = f"{summary.lines} line(s), none a known message and none with SGLang's prefix"
        if summary.unmatched_samples:
            path, n, text = summary.unmatched_samples[0]
            seen += f"; the first reads {clip(text, 80)!r} ({path}:{n})"
        raise InputError(
            f"no line of these files is an SGLang scheduler's: {seen}; "
            "for a deployment's own prefix or wording pass --formats FILE"
        )


def fork_lines(events: pl.DataFrame, cat: Catalogue) -> list[str]:
    """Kinds of the fork's own lines (other than the adder's) in these events: a log with
    them is the fork's (another rank's, or its adder lines worded otherwise), not a
    release's, and keeps the fork's handling."""
    fork = {f.kind for f in cat.formats if f.source.endswith("fork.toml")} - set(REQUIRED)
    return sorted(set(events["kind"].to_list()) & fork) if events.height else []


def analyse_stock(
    events: pl.DataFrame,
    summary: ParseSummary,
    cat: Catalogue,
    overrides: dict[str, int | None] | None = None,
    profile: ProfileChoice | None = None,
) -> StockAnalysis:
    """Everything a log without adder lines tells (``profile``: the release its lines
    tell). Raises InputError when nothing in the files is a scheduler's (no event and no
    line with its prefix)."""
    require_scheduler_log(summary)
    overrides = overrides or {}
    notes: list[StockContradiction] = []
    ooms = observed_ooms(events)
    chunk = _chunk_size(events, overrides.get("chunked_prefill_size"))
    fatal = ooms[-1].where if ooms else None
    pool = _check_against_ooms(pool_size(events, overrides.get("pool_size"), notes), ooms, notes)
    return StockAnalysis(
        summary=summary,
        node=node_kind(events),
        pool=pool,
        chunk_size=chunk,
        ooms=ooms,
        retractions=retractions(events),
        crashes=crashes(events),
        trend=batch_trend(events, fatal, chunk.value if chunk else None),
        needed_lines=needed_lines(cat),
        contradictions=notes,
        profile=profile,
    )


class NoAdderLines(InputError):
    """Logs without a PrefillAdder line: nothing to replay (the message says why and what
    to give instead). A release's log (``release``: none of the fork's own lines either)
    still tells what ``stock()`` analyses."""

    def __init__(
        self, events: pl.DataFrame, summary: ParseSummary, cat: Catalogue,
        overrides: dict[str, int | None], profile: ProfileChoice,
    ) -> None:  # fmt: skip
        self.events, self.summary, self.cat = events, summary, cat
        self.overrides, self.profile = overrides, profile
        self.release = not fork_lines(events, cat)
        super().__init__(self._why())

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.events, self.summary, self.cat, self.overrides, self.profile)

    def _why(self) -> str:
        if self.summary.decode_node:
            return (
                "these are a decode (or colocated) node's logs (Decode batch lines): "
                "kvforensics replays prefill nodes"
            )
        hint = "; `kvforensics replay` tells what this log shows" if self.release else ""
        return (
            "no PrefillAdder lines in these logs, nothing to replay: give the deciding rank's "
            f"(PP0) log of a build that prints them (upstream SGLang releases do not){hint}"
        )

    def stock(self) -> StockAnalysis:
        """What a release's log tells (``release``; raises InputError when nothing in the
        files is a scheduler's)."""
        return analyse_stock(self.events, self.summary, self.cat, self.overrides, self.profile)
