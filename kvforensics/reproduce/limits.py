"""What a reproducer says about itself: the chain it shows, which facts of the incident
it keeps and which it drops, and the sizes that could not go lower (and why)."""

from __future__ import annotations

from kvforensics.model.sizing import ceil_page
from kvforensics.reproduce.chain import OUTSIDE
from kvforensics.reproduce.shrink import Shrunk


def story(s: Shrunk, fix: str) -> list[str]:
    """The chain in the reproducer's own numbers."""
    ch, c = s.chain, s.case
    o = ch.oom
    crash = (
        f"Under prefix {o.rid} runs out of memory in round {o.round}: allocating {o.tokens} "
        f"tokens with {o.available} available."
    )
    if ch.kind == OUTSIDE:
        taken = ", ".join(f"{t} tokens before round {r}" for r, t in ch.outside)
        fixed = "runs out of memory too" if ch.fix_oom else "does not run out"
        return [
            f"Something outside the adder takes {taken}. {crash} Without that allocation "
            f"nothing runs out of memory; under {fix} the run {fixed}: no adder change "
            "guards memory the adder never saw."
        ]
    lk = ch.truncation()
    how = "resumed (add_chunked_req)" if lk.call == "add_chunked_req" else "truncated (add_one_req)"
    cut = ""
    if lk.unaligned_end != lk.piece[1]:
        cut = f" (the alignment cut it from {lk.unaligned_end - lk.piece[0]} tokens)"
    compute = lk.intruder_piece[1] - lk.intruder_piece[0]
    loads = f", loads back {lk.load_back} tokens at admission" if lk.load_back else ""
    tail = lk.seq_len - lk.piece[1]
    return [
        f"{lk.victim} ({lk.seq_len} tokens) is {how} in round {lk.round} to "
        f"[{lk.piece[0]}, {lk.piece[1]}){cut}, leaving {lk.gap} tokens of chunk budget. "
        f"{lk.intruder} comes through that gap: it computes {compute} tokens{loads}; its "
        f"memory check ({lk.need} < {lk.rem_total_tokens}) passes because {lk.victim}'s tail "
        f"of {tail} tokens is charged to nobody. {crash} Under {fix} the tail "
        f"({ceil_page(tail, c.page)} + first token) is charged to rem_total_token_offset, "
        f"{lk.intruder} is refused and every request finishes.",
    ]


def keeps(s: Shrunk, fix: str) -> tuple[str, ...]:
    ch = s.chain
    if ch.kind == OUTSIDE:
        return (
            "Keeps: the outside allocation, the request it starves and the out-of-memory it "
            "ends in under prefix (and that without the allocation there is none).",
        )
    lk = ch.truncation()
    return (
        "Keeps the cause's chain: a truncation that leaves chunk budget "
        f"({lk.call}), the tail promised to nobody, a request admitted through the gap "
        f"that {fix} refuses" + (" (a host load-back)" if lk.load_back else "")
        + f", and the out-of-memory of the truncated request under prefix; none under {fix}.",
    )  # fmt: skip


def drops(s: Shrunk, logs: bool) -> tuple[str, ...]:
    """The incident's facts the reproducer leaves out, counted."""
    a, b = s.original, s.case
    out = []
    gone = [r.rid for r in a.requests() if r.rid not in {x.rid for x in b.requests()}]
    if gone:
        out.append(f"Drops the traffic: {len(gone)} of {len(a.requests())} requests "
                   f"({_names(gone)}).")  # fmt: skip
    if len(b.inflight) < len(a.inflight):
        held = sum(t.tokens for t in a.inflight) - sum(t.tokens for t in b.inflight)
        out.append(f"Drops the KV transfers: {len(a.inflight) - len(b.inflight)} of "
                   f"{len(a.inflight)} ({held} slots held).")  # fmt: skip
    if a.arrivals and not b.arrivals:
        out.append("Drops the arrival times: every request waits from the start.")
    out.append(
        "Drops the timing: rounds and transfers run on the model's clock (round "
        f"{b.round_overhead_s:g} s, transfer {b.transfer_latency_s:g} s), not the log's."
    )
    sizes = []
    for name in ("page_size", "align_size", "truncation_align_size", "chunked_prefill_size",
                 "max_prefill_tokens"):  # fmt: skip
        if a.size(name) != b.size(name):
            sizes.append(f"{name} {a.size(name)} -> {b.size(name)}")
    sizes.append(f"pool {a.pool_size} -> {b.pool_size} (1/{a.pool_size / b.pool_size:.0f})")
    out.append("Scales the sizes: " + ", ".join(sizes) + ".")
    for t in s.held_back():
        key, _, change = t.what.partition(" ")
        out.append(f"Keeps {key} at {change.split(' -> ')[0]}: at {change.split(' -> ')[-1]} "
                   f"{t.why}.")  # fmt: skip
    if logs:
        out.append("Drops what only the logs hold: the rounds before the start round, the "
                   "other ranks' lines, the AttentionStore writes and the timestamps.")  # fmt: skip
    return tuple(out)


def _names(rids: list[str], most: int = 6) -> str:
    return ", ".join(rids[:most]) + (f" and {len(rids) - most} more" if len(rids) > most else "")


def description(s: Shrunk, fix: str, source: str) -> str:
    return (
        f"Reduced by `kvforensics reproduce` from {source} ({len(s.tried)} reductions tried, "
        f"{sum(t.kept for t in s.tried)} kept).\n" + "\n".join(story(s, fix))
    )


def toml_comments(s: Shrunk) -> dict[str, list[str]]:
    return {
        "config": [
            f"pool_size is free + evictable + held: {s.case.pool_size} "
            f"(the original's {s.original.pool_size})"
        ]
    }
