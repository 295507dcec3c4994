"""Other ranks' lines against the deciding rank's rounds.

PP3 prints the batch lines (``#new-token`` = sum of raw piece lengths); other PP ranks
print the plan they replay. Each is matched to the rebuilt rounds from the end of the log
backwards (every rank's log ends at the same crash), then compared number by number.
"""

from __future__ import annotations

import polars as pl

from kvforensics.rounds.provenance import where
from kvforensics.rounds.rebuild import Rebuild, Round


def _tail_pairs(rounds: list[Round], lines: list[dict]) -> list[tuple[Round, dict]]:
    return list(zip(reversed(rounds), reversed(lines), strict=False))


def _count(rb: Rebuild, rank: str, what: str, theirs: int, ours: int) -> None:
    """More lines than rounds means rounds the deciding rank's log does not show (or a
    log that starts earlier); fewer means this rank's log starts later. Only the first is
    a contradiction: logs of different lengths are common."""
    if theirs > ours:
        rb.contradictions.append(
            {
                "round": None,
                "what": "round count",
                "detail": f"{rank} printed {theirs} {what}, but {rb.rank}'s rounds give {ours}: "
                "rounds are missing from the rebuild (compared from the end of the logs)",
            }
        )


#: every rank's log ends at the same crash; ends further apart than this are different runs
END_SLACK_S = 60.0


def _span(events: pl.DataFrame, rank: str) -> tuple[object, object, list[str]] | None:
    ev = events.filter((pl.col("rank") == rank) & pl.col("time").is_not_null())
    if not ev.height:
        return None
    return ev["time"].min(), ev["time"].max(), sorted(ev["file"].unique().to_list())


def _apart(rb: Rebuild, events: pl.DataFrame, rank: str) -> bool:
    """True (and one contradiction recorded) when ``rank``'s lines cannot be paired with
    the deciding rank's rounds from the end: their times do not overlap, or they end far
    apart. Without times there is nothing to tell, so they are compared."""
    ours, theirs = _span(events, rb.rank), _span(events, rank)
    if ours is None or theirs is None:
        return False
    (a0, a1, af), (b0, b1, bf) = ours, theirs
    if b0 > a1 or a0 > b1:
        why = "their time ranges do not overlap"
    elif abs((b1 - a1).total_seconds()) > END_SLACK_S:
        why = f"they end {abs((b1 - a1).total_seconds()):.0f} s apart, so not at the same crash"
    else:
        return False
    rb.contradictions.append(
        {
            "round": None,
            "what": "different times",
            "detail": f"{rank} ({', '.join(bf)}: {b0} to {b1}) and {rb.rank} "
            f"({', '.join(af)}: {a0} to {a1}): {why}; {rank}'s lines are not compared",
        }
    )
    return True


def cross_check(rb: Rebuild, events: pl.DataFrame) -> None:
    """Attach PP3 batch lines and PP replay plans to ``rb``'s rounds; record contradictions."""
    if not rb.rounds:
        return  # nothing to compare against (the deciding rank printed no round)
    forwarded = [r for r in rb.rounds if r.pieces and r.oom is None]
    with_pieces = [r for r in rb.rounds if r.pieces]
    batches = events.filter(pl.col("kind") == "prefill_batch").sort(["file", "line"])
    if batches.height:
        for rank in batches["rank"].unique().sort().to_list():
            if _apart(rb, events, rank):
                continue
            lines = batches.filter(pl.col("rank") == rank).to_dicts()
            extra = len(lines) - len(forwarded)
            if extra > 0 and rb.pending:
                # PP0's log ends while a request is still chunked; PP3 shows its later
                # (silent) rounds.
                rb.extend_silent(
                    extra, f"{rank} printed {extra} batch line(s) after {rb.rank}'s last round"
                )
                forwarded = [r for r in rb.rounds if r.pieces and r.oom is None]
                with_pieces = [r for r in rb.rounds if r.pieces]
            _count(rb, rank, "batch lines", len(lines), len(forwarded))
            for rnd, b in _tail_pairs(forwarded, lines):
                rnd.batch = {
                    "rank": rank,
                    "new_token": b["new_token"],
                    "new_seq": b["new_seq"],
                    "inflight_req": b.get("inflight_req"),
                    "queue_req": b.get("queue_req"),
                    "cached_token": b["cached_token"],
                    "where": where(b),
                }
                total = rnd.new_tokens()
                if b["new_token"] != total:
                    rb.contradictions.append(
                        {
                            "round": rnd.index,
                            "what": "#new-token",
                            "detail": f"{where(b)} says #new-token: {b['new_token']}, the rebuilt pieces sum to {total}",
                        }
                    )
                    continue
                for p in rnd.pieces:
                    if p.provenance != "observed":
                        p.cross_checked = True
                        p.evidence.append(
                            f"{rank} batch line {where(b)}: #new-token: {b['new_token']}"
                        )
    plans = events.filter(pl.col("kind") == "replay_plan").sort(["file", "line"])
    if plans.height:
        for rank in plans["rank"].unique().sort().to_list():
            if _apart(rb, events, rank):
                continue
            lines = plans.filter(pl.col("rank") == rank).to_dicts()
            # The plan of the crashing round may or may not have reached this rank.
            targets = (
                with_pieces
                if lines and rb.oom and lines[-1]["extend_tokens"] == rb.oom.get("tokens")
                else forwarded
            )
            _count(rb, rank, "replayed plans", len(lines), len(targets))
            for rnd, p in _tail_pairs(targets, lines):
                rids = [x.rid for x in rnd.pieces]
                plan = {
                    "rank": rank,
                    "rids": p["rids"],
                    "extend_tokens": p["extend_tokens"],
                    "where": where(p),
                }
                rnd.replays.append(plan)
                if list(p["rids"] or []) != rids or p["extend_tokens"] != rnd.new_tokens():
                    rb.contradictions.append(
                        {
                            "round": rnd.index,
                            "what": "PP plan",
                            "detail": f"{rank} replayed rids={p['rids']} extend_tokens={p['extend_tokens']} ({where(p)}); {rb.rank} decided {rids} with {rnd.new_tokens()} tokens",
                        }
                    )
                else:
                    for piece in rnd.pieces:
                        if piece.provenance != "observed":
                            piece.cross_checked = True
                            piece.evidence.append(
                                f"{rank} replayed the same plan ({where(p)}): extend_tokens={p['extend_tokens']}"
                            )
