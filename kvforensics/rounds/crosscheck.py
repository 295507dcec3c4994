"""Other ranks' lines against the deciding rank's rounds.

PP3 prints the batch lines (``#new-token`` = sum of raw piece lengths); other PP ranks
print the plan they replay. Each is matched to the rebuilt rounds by content and time,
from the end of the logs backwards (every rank's log ends at the same crash), so that one
extra or missing round is one local finding; then compared number by number.
"""

from __future__ import annotations

import polars as pl

from kvforensics.rounds.provenance import where
from kvforensics.rounds.rebuild import Rebuild, Round


def _align(rounds: list[Round], lines: list[dict], same) -> list[tuple[Round | None, dict | None]]:
    """Pair rounds with another rank's lines from the end of the logs backwards (every
    rank's log ends at the same crash), by content: where a pair disagrees, a round or a
    line that the next few would match is skipped, so one extra or missing round stays a
    local finding instead of shifting every pair before it. ``same(round, line)`` says
    whether they agree. Unpaired items come back with None on the other side."""
    out: list[tuple[Round | None, dict | None]] = []
    i, j = len(rounds) - 1, len(lines) - 1
    while i >= 0 and j >= 0:
        if same(rounds[i], lines[j]):
            out.append((rounds[i], lines[j]))
            i, j = i - 1, j - 1
            continue
        skip = _resync(rounds, lines, i, j, same)
        if skip is None:
            out.append((rounds[i], lines[j]))  # a real disagreement, in place
            i, j = i - 1, j - 1
        elif skip[0]:
            out.extend((rounds[i - k], None) for k in range(skip[0]))
            i -= skip[0]
        else:
            out.extend((None, lines[j - k]) for k in range(skip[1]))
            j -= skip[1]
    return out


def _resync(rounds, lines, i, j, same, reach: int = 3, run: int = 3):
    """The fewest rounds (or lines) to skip so that the next ``run`` pairs agree, taken
    from the side that has more left."""

    def agrees(a: int, b: int) -> bool:
        n = min(run, a + 1, b + 1)
        return n > 0 and all(same(rounds[a - k], lines[b - k]) for k in range(n))

    # Skip only from the side with more left: with as many rounds as lines, a pair that
    # disagrees is a disagreement, not a missing round.
    for k in range(1, reach + 1):
        if i > j and i - k >= 0 and agrees(i - k, j):
            return (k, 0)
        if j > i and j - k >= 0 and agrees(i, j - k):
            return (0, k)
    return None


def _seconds_apart(rnd: Round, line: dict) -> float | None:
    if rnd.time is None or line.get("time") is None:
        return None
    return abs((line["time"] - rnd.time).total_seconds())


def _unpaired(rb: Rebuild, rank: str, what: str, pairs, span_r, span_l) -> None:
    """One finding per line that no round matches and per round that no line matches,
    each only inside the other side's time span (logs of different lengths are common)."""
    for rnd, line in pairs:
        if rnd is None and _within(line.get("time"), span_r):
            rb.contradictions.append(
                {
                    "round": None,
                    "what": what,
                    "detail": f"{rank} line {where(line)} matches no rebuilt round of {rb.rank}",
                }
            )
        elif line is None and _within(rnd.time, span_l):
            rb.contradictions.append(
                {
                    "round": rnd.index,
                    "what": what,
                    "detail": f"no {rank} line matches round {rnd.index}: a round {rank} did not "
                    "run, or one the rebuild should not have",
                }
            )


def _within(t, span) -> bool:
    return t is None or span is None or span[0] <= t <= span[1]


#: seconds between a round and another rank's line about it, at most (1-second stamps,
#: a forward in between)
NEAR_S = 5


def _near(rnd: Round, line: dict) -> bool:
    gap = _seconds_apart(rnd, line)
    return gap is None or gap <= NEAR_S


def _span(items: list, time_of) -> tuple | None:
    times = [t for t in map(time_of, items) if t is not None]
    return (min(times), max(times)) if times else None


def _pairs(rb: Rebuild, rank: str, what: str, rounds: list[Round], lines: list[dict], same):
    """Aligned pairs of both sides; the unpaired ones inside the other side's time span are
    findings."""
    pairs = _align(rounds, lines, same)
    paired_r = {id(r) for r, _ in pairs if r is not None}
    paired_l = {id(ln) for _, ln in pairs if ln is not None}
    pairs += [(r, None) for r in rounds if id(r) not in paired_r]
    pairs += [(None, ln) for ln in lines if id(ln) not in paired_l]
    span_r = _span(rounds, lambda r: r.time)
    span_l = _span(lines, lambda ln: ln.get("time"))
    _unpaired(
        rb, rank, what, [(r, ln) for r, ln in pairs if r is None or ln is None], span_r, span_l
    )
    return [(r, ln) for r, ln in pairs if r is not None and ln is not None]


#: every rank's log ends at the same crash; ends further apart than this are different runs
END_SLACK_S = 60.0


def _rank_span(events: pl.DataFrame, rank: str) -> tuple[object, object, list[str]] | None:
    ev = events.filter((pl.col("rank") == rank) & pl.col("time").is_not_null())
    if not ev.height:
        return None
    return ev["time"].min(), ev["time"].max(), sorted(ev["file"].unique().to_list())


def _apart(rb: Rebuild, events: pl.DataFrame, rank: str) -> bool:
    """True (and one contradiction recorded) when ``rank``'s lines cannot be paired with
    the deciding rank's rounds from the end: their times do not overlap, or they end far
    apart. Without times there is nothing to tell, so they are compared."""
    ours, theirs = _rank_span(events, rb.rank), _rank_span(events, rank)
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
    batches = events.filter(pl.col("kind") == "prefill_batch").sort(["file", "line"])
    for rank in batches["rank"].unique().sort().to_list() if batches.height else []:
        if not _apart(rb, events, rank):
            _check_batches(rb, rank, batches.filter(pl.col("rank") == rank).to_dicts())
    plans = events.filter(pl.col("kind") == "replay_plan").sort(["file", "line"])
    for rank in plans["rank"].unique().sort().to_list() if plans.height else []:
        if not _apart(rb, events, rank):
            _check_plans(rb, rank, plans.filter(pl.col("rank") == rank).to_dicts())


def _forwarded(rb: Rebuild) -> list[Round]:
    return [r for r in rb.rounds if r.pieces and r.oom is None]


def _check_batches(rb: Rebuild, rank: str, lines: list[dict]) -> None:
    extra = len(lines) - len(_forwarded(rb))
    if extra > 0 and rb.pending:
        # PP0's log ends while a request is still chunked; PP3 shows its later (silent) rounds.
        rb.extend_silent(
            extra, f"{rank} printed {extra} batch line(s) after {rb.rank}'s last round"
        )

    def same(rnd: Round, b: dict) -> bool:
        return b["new_token"] == rnd.new_tokens() and _near(rnd, b)

    for rnd, b in _pairs(rb, rank, "batch line", _forwarded(rb), lines, same):
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
        _settle(
            rb,
            rnd,
            b["new_token"] == total,
            "#new-token",
            f"{where(b)} says #new-token: {b['new_token']}, the rebuilt pieces sum to {total}",
            f"{rank} batch line {where(b)}: #new-token: {b['new_token']}",
        )


def _misfits(rounds: list[Round], lines: list[dict], same) -> int:
    """How many rounds and lines an alignment leaves unpaired or disagreeing."""
    return sum(r is None or ln is None or not same(r, ln) for r, ln in _align(rounds, lines, same))


def _check_plans(rb: Rebuild, rank: str, lines: list[dict]) -> None:
    def same(rnd: Round, p: dict) -> bool:
        rids = [x.rid for x in rnd.pieces]
        return (
            list(p["rids"] or []) == rids
            and p["extend_tokens"] == rnd.new_tokens()
            and _near(rnd, p)
        )

    # The plan of the crashing round may or may not have reached this rank: the reading
    # that pairs the lines with fewer misfits (a last line the size of the out-of-memory
    # piece may as well be the round before it, when the pieces are all one chunk).
    targets = _forwarded(rb)
    if lines and rb.oom and lines[-1]["extend_tokens"] == rb.oom.get("tokens"):
        with_crash = [r for r in rb.rounds if r.pieces]
        if _misfits(with_crash, lines, same) < _misfits(targets, lines, same):
            targets = with_crash

    for rnd, p in _pairs(rb, rank, "replayed plan", targets, lines, same):
        rids = [x.rid for x in rnd.pieces]
        rnd.replays.append(
            {
                "rank": rank,
                "rids": p["rids"],
                "extend_tokens": p["extend_tokens"],
                "where": where(p),
            }
        )
        _settle(
            rb,
            rnd,
            list(p["rids"] or []) == rids and p["extend_tokens"] == rnd.new_tokens(),
            "PP plan",
            f"{rank} replayed rids={p['rids']} extend_tokens={p['extend_tokens']} ({where(p)}); "
            f"{rb.rank} decided {rids} with {rnd.new_tokens()} tokens",
            f"{rank} replayed the same plan ({where(p)}): extend_tokens={p['extend_tokens']}",
        )


def _settle(rb: Rebuild, rnd: Round, agrees: bool, what: str, detail: str, note: str) -> None:
    """A disagreement is a contradiction; an agreement cross-checks the round's pieces that
    were not observed."""
    if not agrees:
        rb.contradictions.append({"round": rnd.index, "what": what, "detail": detail})
        return
    for piece in rnd.pieces:
        if piece.provenance != "observed":
            piece.cross_checked = True
            piece.evidence.append(note)
