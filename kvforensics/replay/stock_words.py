"""A stock-log analysis in words (plain text, one paragraph a line), for the terminal
and the report."""

from __future__ import annotations

from kvforensics.replay.profile_choice import ProfileChoice
from kvforensics.replay.stock import (
    CRASH_KINDS,
    NOT_REBUILT,
    Crash,
    ObservedOom,
    Retractions,
    StockAnalysis,
)
from kvforensics.replay.stock_trend import BatchTrend

NODE_WORDS = {
    "pd_prefill": "a PD prefill node",
    "decode": "a decode node",
    "colocated": "a colocated node, prefill and decode",
    "prefill": "a node that prefills, PD prefill or colocated (the lines do not say which)",
    "unknown": "a node of unknown kind",
}


def _oom_line(o: ObservedOom) -> str:
    phase = f"{o.phase} out of memory" if o.phase else "Out of memory (no phase printed)"
    at = f" at {o.time}" if o.time else ""
    rank = f" on {o.rank}" if o.rank else ""
    if o.tokens is None:
        return f"{phase}{at}{rank} ({o.where}): the message prints no numbers"
    return f"{phase}{at}{rank} ({o.where}): {o.arithmetic.mechanism}: {o.arithmetic.reason}"


def _crash_line(c: Crash) -> str:
    what = CRASH_KINDS[c.kind] + (f" ({c.device})" if c.device else "")
    at = f" at {c.time}" if c.time else ""
    rank = f" on {c.rank}" if c.rank else ""
    exc = c.exception or "the exception line is not in the log"
    return f"Crash, {what}{at}{rank} ({c.where}): {exc}"


def _pool_line(a: StockAnalysis) -> str:
    p = a.pool
    if p.value is not None:
        return f"Pool: {p.value} tokens ({p.provenance}: {', '.join(p.evidence)})"
    if p.interval:
        lo, hi = p.interval
        span = f"at least {lo}" if hi >= 2**62 else f"between {lo} and {hi}"
        return f"Pool: {span} tokens ({p.provenance}: {', '.join(p.evidence)})"
    return f"Pool: unknown ({', '.join(p.evidence)}; --pool-size gives it)"


def _trend_lines(t: BatchTrend, after_oom: bool) -> list[str]:
    head = "Batch lines before the out-of-memory" if after_oom else "Batch lines"
    if not t.lines:
        return [f"{head}: none"]
    out = [f"{head}: {t.lines} Prefill batch line(s) up to {t.until}"]
    u = t.token_usage
    if u is not None:
        out.append(f"  token usage {u.first:.2f} -> {u.last:.2f} (max {u.max:.2f})")
    nt = t.new_token
    if nt is not None:
        chunk = (
            f", {nt.full_chunks} full chunk(s) of {nt.chunk_size}"
            if nt.chunk_size
            else " (chunk size not in the log)"
        )
        out.append(f"  #new-token up to {nt.max}{chunk}")
    # (#running-req is told in the JSON only)
    depths = (
        ("#queue-req", t.queue_req),
        ("#transferring-req", t.transferring_req),
        ("#inflight-req", t.inflight_req),
    )
    out += [f"  {name} {d.first} -> {d.last} (max {d.max})" for name, d in depths if d is not None]
    return out


def _retraction_line(r: Retractions) -> str:
    if not r.count:
        return "Retractions: none"
    reqs = f", {r.requests} request(s) sent back to the queue" if r.requests is not None else ""
    return f"Retractions (not crashes): {r.count} line(s){reqs}, {r.first} .. {r.last}"


def release_line(choice: ProfileChoice) -> str:
    """The model profile, and why that one (given, told by the lines, or the default)."""
    return f"Model profile: {choice.describe()}"


def stock_text(a: StockAnalysis) -> list[str]:
    """The analysis as lines of plain text, the first a heading."""
    out = [
        "A stock log (no PrefillAdder lines): what it tells",
        f"Node: {NODE_WORDS[a.node.kind]} ({'; '.join(a.node.evidence)})",
        _pool_line(a),
    ]
    if a.profile is not None:
        out.append(release_line(a.profile))
    if a.ooms:
        out.append(
            f"{len(a.ooms)} KV-pool out-of-memory message(s); the last is the one the server "
            "went down with:"
        )
        out += ["  " + _oom_line(o) for o in a.ooms]
    else:
        out.append("No out-of-memory message in these logs.")
    out.append(_retraction_line(a.retractions))
    out += [_crash_line(c) for c in a.crashes]
    out += _trend_lines(a.trend, bool(a.ooms))
    out += [f"contradiction: {c.what}: {c.detail}" for c in a.contradictions]
    out.append(NOT_REBUILT)
    out.append(
        "Lines that would be needed, from the deciding rank (PP0): " + "; ".join(a.needed_lines)
    )
    return out
