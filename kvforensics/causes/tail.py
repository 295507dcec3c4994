"""``unreserved_tail``: a truncation left chunk budget, the truncated request's tail was
promised to nobody, and a request cheap in compute but large in memory came through the
gap (the 2026-11-02 incident)."""

from __future__ import annotations

import polars as pl

from kvforensics.causes.cause import Cause


def root_cause(rr) -> dict | None:
    """From the ``prefix`` ledger: the truncation whose tail was not reserved and the
    request admitted through its gap that ``fixed`` refuses.

    Every truncation up to the out-of-memory is a candidate (a piece that is not its
    request's last, from ``add_one_req`` or a resumed ``add_chunked_req``): the victim's
    first, then other requests' (their unreserved tails drew on the same pool), each in
    order of events. The first with an intruder is the gap that mattered; without one, the
    victim's first truncation that left chunk budget (else its first) says why not."""
    fix = rr.results.get("fixed")
    rows, df = _truncations(rr)
    if not rows:
        return None
    victim = rows[0]["rid"]
    for t in rows:
        if (t["rem_chunk_after"] or 0) > 0:
            intruder = _intruder(_after(df, t), fix, t["round"])
            if intruder is not None:
                return _figures(rr, t, intruder)
    mine = [t for t in rows if t["rid"] == victim]
    t = next((t for t in mine if (t["rem_chunk_after"] or 0) > 0), mine[0])
    return _figures(rr, t, None)


def _truncations(rr) -> tuple[list[dict], pl.DataFrame | None]:
    """The ``prefix`` ledger's truncations up to its out-of-memory, the victim's first
    (none when the victim was never truncated), and the ledger's adder calls."""
    pre = rr.results.get("prefix")
    if pre is None or pre.oom is None:
        return [], None
    victim = pre.oom.rid
    df = pre.ledger.to_frame().filter(pl.col("call").is_in(["add_one_req", "add_chunked_req"]))
    trunc = df.filter(
        pl.col("decision").is_in(["truncated", "resumed"])
        & (pl.col("end") < pl.col("seq_len"))
        & (pl.col("round") <= pre.oom.round)
    ).sort(pl.col("rid") != victim, "round", "step")
    if trunc.is_empty() or trunc["rid"][0] != victim:
        return [], df
    return trunc.to_dicts(), df


def _after(df: pl.DataFrame, t: dict) -> pl.DataFrame:
    """The requests admitted in ``t``'s round after it."""
    return df.filter(
        (pl.col("round") == t["round"])
        & (pl.col("step") > t["step"])
        & pl.col("decision").is_in(["full", "truncated"])
    )


def _figures(rr, t: dict, intruder: dict | None) -> dict:
    """``root_cause``'s fields for truncation ``t`` and the request through its gap."""
    cfg = rr.rebuild.cfg
    i = intruder or {}
    return {
        "victim_rid": t["rid"],
        "victim_seq_len": t["seq_len"],
        "unreserved_tail": t["seq_len"] - t["end"],
        "victim_piece": [t["start"], t["end"]],
        "unaligned_piece": t["unaligned_end"] - t["start"],
        "aligned_piece": t["end"] - t["start"],
        "align_size": cfg.align_size,
        "leftover_chunk_budget": t["rem_chunk_after"],
        "intruder_rid": i.get("rid"),
        "intruder_compute": (i["end"] - i["start"]) if intruder else None,
        # the chunk budget it spent: its piece in whole pages
        "intruder_compute_paged": (i["rem_chunk_tokens"] - i["rem_chunk_after"])
        if intruder
        else None,
        "intruder_load_back": i.get("load_back"),
        "intruder_rem_total_tokens": i.get("rem_total_tokens"),
        "intruder_need": i.get("need"),
        "round": t["round"],
        "round_time": _time_of(rr, t["round"]),
    }


def _intruder(after: pl.DataFrame, fix, rnd: int) -> dict | None:
    """The first request admitted after the truncation that ``fixed`` does not admit."""
    if fix is None or not after.height:
        return None
    fdf = fix.ledger.to_frame().filter(pl.col("round") == rnd)
    for row in after.iter_rows(named=True):
        f = fdf.filter(pl.col("rid") == row["rid"])
        if f.is_empty() or f["decision"][0] == "rejected":
            return row
    return None


def _considered(rows: list[dict]) -> str:
    """Every truncation the detector looked at, in the order it looked."""
    seen = "; ".join(
        f"round {t['round']} {t['rid']} [{t['start']}, {t['end']}) "
        f"{t['rem_chunk_after']} chunk budget left"
        for t in rows
    )
    return f"truncations before the out-of-memory ({len(rows)}): {seen}"


def _time_of(rr, index: int) -> str | None:
    rnd = rr.rebuild.round_at(index)
    return rnd.time.isoformat(sep=" ") if rnd is not None and rnd.time is not None else None


def story(rc: dict) -> list[str]:
    """The incident's chain in words."""
    when = f" ({rc['round_time']})" if rc.get("round_time") else ""
    lines = [
        f"{rc['victim_rid']} ({rc['victim_seq_len']} tokens) was truncated in round {rc['round']}"
        f"{when} to [{rc['victim_piece'][0]}, {rc['victim_piece'][1]}): the "
        f"{rc['align_size']}-token checkpoint alignment cut its piece from "
        f"{rc['unaligned_piece']} to {rc['aligned_piece']}, leaving "
        f"{rc['leftover_chunk_budget']} tokens of chunk budget.",
        f"Its tail of {rc['unreserved_tail']} tokens was not charged to rem_total_token_offset.",
    ]
    if rc["intruder_rid"]:
        lines.append(
            f"{rc['intruder_rid']} came through the gap: it computes {rc['intruder_compute']} "
            f"tokens ({rc['intruder_compute_paged']} paged, within the "
            f"{rc['leftover_chunk_budget']} left) but loaded back {rc['intruder_load_back']} "
            f"tokens at admission; its memory check ({rc['intruder_need']} < "
            f"{rc['intruder_rem_total_tokens']}) passed only because the tail was not reserved."
        )
        lines.append(
            "Three conditions held together: (1) chunk budget left after a truncation "
            "(alignment), (2) the truncated request's tail not reserved, (3) a request cheap in "
            "compute but large in memory (host load-back) admitted through the gap."
        )
    return lines


def unreserved_tail(rr, rc: dict | None) -> Cause:
    """Held when the victim's truncation left chunk budget and a request that the fix
    refuses was admitted through it."""
    if not rr.rebuild.oom:
        return Cause("unreserved_tail", False, "no out-of-memory in these logs")
    if rc is None:
        pre = rr.results.get("prefix")
        if pre is None or pre.oom is None:
            return Cause(
                "unreserved_tail",
                None,
                "cannot tell: the prefix replay does not reach the out-of-memory",
            )
        return Cause(
            "unreserved_tail", False, f"{pre.oom.rid} was never truncated in the replayed rounds"
        )
    figures = dict(rc)
    rnd = rc["round"]
    evidence = [
        f"prefix ledger, round {rnd}: {rc['victim_rid']} truncated to "
        f"[{rc['victim_piece'][0]}, {rc['victim_piece'][1]}), "
        f"{rc['leftover_chunk_budget']} chunk budget left, tail "
        f"{rc['unreserved_tail']} not reserved",
        _considered(_truncations(rr)[0]),
    ]
    if not rc["leftover_chunk_budget"] or rc["leftover_chunk_budget"] <= 0:
        return Cause(
            "unreserved_tail",
            False,
            f"{rc['victim_rid']}'s truncation spent the whole chunk budget: no gap",
            evidence,
            rnd,
            figures,
        )
    if not rc["intruder_rid"]:
        return Cause(
            "unreserved_tail",
            False,
            f"{rc['leftover_chunk_budget']} tokens of chunk budget were left after "
            f"{rc['victim_rid']}'s truncation, but no request that the fix refuses "
            "came through",
            evidence,
            rnd,
            figures,
        )
    evidence.append(
        f"{rc['intruder_rid']} admitted after it: load-back "
        f"{rc['intruder_load_back']}, memory check {rc['intruder_need']} < "
        f"{rc['intruder_rem_total_tokens']}; refused under fixed"
    )
    summary = (
        f"{rc['intruder_rid']} came through the {rc['leftover_chunk_budget']}-token gap "
        f"after {rc['victim_rid']}'s truncation and took its unreserved tail's slots"
    )
    return Cause("unreserved_tail", True, summary, evidence, rnd, figures, story(rc))
