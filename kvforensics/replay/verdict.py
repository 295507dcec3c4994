"""The verdict in numbers and in words: who lost its tail, who took it, through which gap."""

from __future__ import annotations

import polars as pl

from kvforensics.model import RunResult


def first_token_delays(base: RunResult, other: RunResult) -> list[dict]:
    """Per request: when its prefill finished under each policy, and the difference."""
    out = []
    for rid, req in other.requests.items():
        b = base.requests.get(rid)
        t_other = req.finished_time
        t_base = b.finished_time if b else None
        out.append(
            {
                "rid": rid,
                "finished_round": req.finished_round,
                "base_finished_round": b.finished_round if b else None,
                "delay_s": round(t_other - t_base, 3)
                if t_other is not None and t_base is not None
                else None,
                "note": None
                if t_base is not None
                else "never finished under prefix (it crashed first)",
            }
        )
    return sorted(out, key=lambda d: d["rid"])


def root_cause(rr) -> dict | None:
    """From the ``prefix`` ledger of the start round: the truncated request whose tail was
    not reserved, and the request admitted after it that ``fixed`` refuses."""
    pre, fix = rr.results.get("prefix"), rr.results.get("fixed")
    if pre is None or pre.oom is None:
        return None
    victim = pre.oom.rid
    df = pre.ledger.to_frame().filter(pl.col("call").is_in(["add_one_req", "add_chunked_req"]))
    trunc = df.filter(
        (pl.col("rid") == victim) & (pl.col("decision").is_in(["truncated", "resumed"]))
    )
    if trunc.is_empty():
        return None
    t = trunc.row(0, named=True)
    cfg = rr.rebuild.cfg
    after = df.filter(
        (pl.col("round") == t["round"])
        & (pl.col("step") > t["step"])
        & pl.col("decision").is_in(["full", "truncated"])
    )
    intruder = None
    if fix is not None and after.height:
        fdf = fix.ledger.to_frame().filter(pl.col("round") == t["round"])
        for row in after.iter_rows(named=True):
            f = fdf.filter(pl.col("rid") == row["rid"])
            if f.is_empty() or f["decision"][0] == "rejected":
                intruder = row
                break
    return {
        "victim_rid": victim,
        "victim_seq_len": t["seq_len"],
        "unreserved_tail": t["seq_len"] - t["end"],
        "victim_piece": [t["start"], t["end"]],
        "unaligned_piece": t["unaligned_end"] - t["start"],
        "aligned_piece": t["end"] - t["start"],
        "align_size": cfg.align_size,
        "leftover_chunk_budget": t["rem_chunk_after"],
        "intruder_rid": intruder["rid"] if intruder else None,
        "intruder_compute": (intruder["end"] - intruder["start"]) if intruder else None,
        "intruder_compute_paged": cfg.ceil_page(intruder["end"] - intruder["start"])
        if intruder
        else None,
        "intruder_load_back": intruder["load_back"] if intruder else None,
        "intruder_rem_total_tokens": intruder["rem_total_tokens"] if intruder else None,
        "intruder_need": intruder["need"] if intruder else None,
        "round": t["round"],
        "round_time": _time_of(rr, t["round"]),
    }


def _time_of(rr, index: int) -> str | None:
    rounds = rr.rebuild.rounds
    if 0 <= index < len(rounds) and rounds[index].time is not None:
        return rounds[index].time.isoformat(sep=" ")
    return None


def verdict_text(rc: dict | None, observed: dict | None, results: dict) -> list[str]:
    if rc is None:
        if observed:
            return [
                "The logged out-of-memory was not reproduced by the prefix model; see the fidelity section."
            ]
        return ["No out of memory in these logs."]
    lines = [
        f"{rc['victim_rid']} ({rc['victim_seq_len']} tokens) was truncated in round {rc['round']}"
        f"{' (' + rc['round_time'] + ')' if rc.get('round_time') else ''} to "
        f"[{rc['victim_piece'][0]}, {rc['victim_piece'][1]}): the {rc['align_size']}-token checkpoint alignment cut "
        f"its piece from {rc['unaligned_piece']} to {rc['aligned_piece']}, leaving {rc['leftover_chunk_budget']} tokens of chunk budget.",
        f"Its tail of {rc['unreserved_tail']} tokens was not charged to rem_total_token_offset.",
    ]
    if rc["intruder_rid"]:
        lines.append(
            f"{rc['intruder_rid']} came through the gap: it computes {rc['intruder_compute']} tokens "
            f"({rc['intruder_compute_paged']} paged, within the {rc['leftover_chunk_budget']} left) but loaded back "
            f"{rc['intruder_load_back']} tokens at admission; its memory check ({rc['intruder_need']} < "
            f"{rc['intruder_rem_total_tokens']}) passed only because the tail was not reserved."
        )
    lines.append(
        "Three conditions held together: (1) chunk budget left after a truncation (alignment), "
        "(2) the truncated request's tail not reserved, (3) a request cheap in compute but large in "
        "memory (host load-back) admitted through the gap."
    )
    for name, res in results.items():
        if name == "prefix":
            continue
        lines.append(
            f"Under {name}: "
            + (
                "no out of memory."
                if res.oom is None
                else f"out of memory in round {res.oom.round} ({res.oom.rid}, {res.oom.tokens} tokens)."
            )
        )
    return lines
