"""Events of the deciding rank -> scheduling rounds, each value with its provenance.

The fork prints no round marker and nothing for a resumed chunk, so rounds are cut at:
a non-CONTINUE adder result (the adder stops), a ``rem_chunk_tokens`` that does not follow
from the previous step, and the AttentionStore writes that follow each forward. Rounds
that printed no adder line are inferred by running the chunked request forward through
the model's ``add_chunked_req`` rule, then checked against every other piece of evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import polars as pl

from kvforensics.model import Config
from kvforensics.rounds.drop import Drop
from kvforensics.rounds.provenance import DERIVED, INFERRED, OBSERVED, Prov, where
from kvforensics.rounds.ranks import deciding_rank

KINDS = ("adder_check", "adder_result", "hicache_load_back", "as_write", "oom")


@dataclass
class Decision:
    """One ``add_one_req``: the check line and its result line."""

    rid: str
    seq_len: int
    prefix_len: int
    host_hit_len: int
    rem_chunk_tokens: int
    baseline: int
    rem_total_tokens: int
    cur_rem_tokens: int
    where: str
    decision: str | None = None
    start: int | None = None
    end: int | None = None
    result: str | None = None
    loaded: int = 0

    def load_back_slots(self, cfg: Config) -> int:
        """Slots the load-back took: whole pages after the device prefix."""
        if self.decision not in ("full", "truncated") or not self.loaded:
            return 0
        return cfg.pages_for(self.prefix_len, self.prefix_len + self.loaded)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class Piece:
    rid: str
    start: int
    end: int
    kind: str  # new | resumed
    provenance: str
    evidence: list[str] = field(default_factory=list)
    cross_checked: bool = False
    interval_end: tuple[int, int] | None = None

    def as_dict(self) -> dict:
        d = {
            "rid": self.rid,
            "start": self.start,
            "end": self.end,
            "kind": self.kind,
            "provenance": self.provenance,
            "evidence": self.evidence,
            "cross_checked": self.cross_checked,
        }
        if self.interval_end:
            d["interval_end"] = list(self.interval_end)
        return d


@dataclass
class Round:
    index: int
    time: datetime | None
    decisions: list[Decision] = field(default_factory=list)
    pieces: list[Piece] = field(default_factory=list)
    as_writes: list[tuple[str, int, str]] = field(default_factory=list)  # rid, blocks, where
    baseline: Prov | None = None  # available + evictable when the adder started
    baseline_end: Prov | None = None  # after the round's allocation
    forwarded: bool = False  # AS writes seen: the forward has run
    oom: dict | None = None
    batch: dict | None = None  # the PP3 batch line matched to this round
    replays: list[dict] = field(default_factory=list)  # other PP ranks' plans

    @property
    def observed(self) -> bool:
        return bool(self.decisions)

    def new_tokens(self) -> int:
        return sum(p.end - p.start for p in self.pieces)

    def as_dict(self) -> dict:
        return {
            "round": self.index,
            "time": self.time.isoformat(sep=" ") if self.time else None,
            "observed": self.observed,
            "pieces": [p.as_dict() for p in self.pieces],
            "baseline": self.baseline.as_dict() if self.baseline else None,
            "baseline_end": self.baseline_end.as_dict() if self.baseline_end else None,
            "decisions": [d.as_dict() for d in self.decisions],
            "as_writes": [{"rid": r, "blocks": b, "where": w} for r, b, w in self.as_writes],
            "oom": self.oom,
            "batch": self.batch,
        }


@dataclass
class Rebuild:
    cfg: Config
    config: dict[str, Prov]
    rounds: list[Round]
    oom: dict | None
    contradictions: list[dict]
    block_size: int | None
    rank: str
    seq_lens: dict[str, int]

    #: the request still chunked when the deciding rank's log ends, with the baseline
    #: its last round left (its later rounds may be silent)
    pending: tuple | None = None
    #: falls of the baseline that only silent rounds' evidence shows (``continuity.Drop``)
    drops: list = field(default_factory=list)

    def extend_silent(self, rounds: int, evidence: str) -> int:
        """Add up to ``rounds`` silent rounds of the pending chunked request (another rank
        shows rounds after the deciding rank's last line). Returns how many were added."""
        added = 0
        while self.pending and added < rounds:
            chunked, base_end = self.pending
            r, chunked, base_end, _ = _silent_round(
                self.cfg, chunked, base_end, len(self.rounds), None, self.block_size
            )
            r.pieces[0].evidence.append(evidence)
            self.rounds.append(r)
            self.pending = (chunked, base_end) if chunked else None
            added += 1
        return added

    def as_dict(self) -> dict:
        return {
            "config": {k: v.as_dict() for k, v in self.config.items()},
            "rank": self.rank,
            "rounds": [r.as_dict() for r in self.rounds],
            "oom": self.oom,
            "contradictions": self.contradictions,
        }


def _segment(rows: list[dict], cfg: Config) -> tuple[list[Round], dict | None]:
    rounds: list[Round] = []
    cur: Round | None = None
    oom = None

    def new(time) -> Round:
        r = Round(len(rounds), time)
        rounds.append(r)
        return r

    last_time = None
    for ev in rows:
        kind = ev["kind"]
        if kind == "adder_check":
            last = cur.decisions[-1] if cur and cur.decisions else None
            boundary = (
                cur is None
                or cur.forwarded
                or cur.oom is not None
                or last is None
                or last.result not in (None, "CONTINUE")
                or ev["rem_chunk_tokens"] > last.rem_chunk_tokens
            )
            if not boundary and last.decision in ("full", "truncated"):
                spent = cfg.ceil_page(last.end - last.start)
                if ev["rem_chunk_tokens"] != last.rem_chunk_tokens - spent:
                    boundary = True  # the budget did not carry over: a new adder
            if not boundary:
                # Within a round the baseline moves only by the previous admission's
                # load-back and by this request's prefix lock.
                expected = last.baseline - last.load_back_slots(cfg)
                drop = expected - ev["baseline"]
                if drop < 0 or drop > max(ev["prefix_len"], 0):
                    boundary = True
            if not boundary and ev["time"] is not None and last_time is not None:
                # One adder loop takes milliseconds: a later second is a later round.
                boundary = (ev["time"] - last_time).total_seconds() >= 1
            last_time = ev["time"]
            if boundary:
                cur = new(ev["time"])
            cur.decisions.append(
                Decision(
                    ev["rid"],
                    ev["seq_len"],
                    ev["prefix_len"],
                    ev["host_hit_len"],
                    ev["rem_chunk_tokens"],
                    ev["baseline"],
                    ev["rem_total_tokens"],
                    ev["cur_rem_tokens"],
                    where(ev),
                )
            )
        elif kind == "adder_result":
            if cur and cur.decisions and cur.decisions[-1].rid == ev["rid"]:
                d = cur.decisions[-1]
                d.decision, d.result = ev["decision"], ev["result"]
                d.start, d.end = ev["extend_start"], ev["extend_end"]
        elif kind == "hicache_load_back":
            if cur and cur.decisions and cur.decisions[-1].rid == ev["rid"]:
                cur.decisions[-1].loaded = ev["loaded"]
        elif kind == "as_write":
            # One forward's writes share a round; a rid written twice means another round.
            # A write whose block count does not match the piece this round logged for the
            # same request belongs to a later, silent round of that request.
            logged_end = next(
                (
                    d.end
                    for d in (cur.decisions if cur else [])
                    if d.rid == ev["rid"] and d.end is not None
                ),
                None,
            )
            stale = logged_end is not None and ev["blocks"] != logged_end // ev["block_size"]
            if (
                cur is None
                or cur.oom is not None
                or stale
                or any(r == ev["rid"] for r, _, _ in cur.as_writes)
            ):
                cur = new(ev["time"])
            cur.as_writes.append((ev["rid"], ev["blocks"], where(ev)))
            cur.forwarded = True
        elif kind == "oom":
            oom = {
                "tokens": ev["oom_tokens"],
                "available": ev["oom_available"],
                "available_size": ev["oom_available_size"],
                "evictable_size": ev["oom_evictable_size"],
                "where": where(ev),
                "time": ev["time"].isoformat(sep=" ") if ev["time"] else None,
                "swa_available": ev.get("oom_swa_available"),
                "mamba_available": ev.get("oom_mamba_available"),
            }
            if cur is None or cur.forwarded or not _batch_of(cur, cfg, oom["tokens"]):
                cur = new(ev["time"])
            cur.oom = oom
    return rounds, oom


def _batch_of(rnd: Round, cfg: Config, tokens: int | None) -> bool:
    """Is ``Try to allocate tokens`` this round's batch? Its admitted pieces plus at most
    the resumed chunk's (the chunk budget spent before its first check)."""
    if not rnd.decisions or tokens is None:
        return False
    new = sum(d.end - d.start for d in rnd.decisions
              if d.decision in ("full", "truncated") and d.start is not None)
    resumed = cfg.chunked_prefill_size - rnd.decisions[0].rem_chunk_tokens
    return new <= tokens <= new + resumed and (tokens == new or resumed > 0)


def _chunk_step(cfg: Config, done: int, seq_len: int, baseline: int) -> tuple[int, bool]:
    """The model's ``add_chunked_req`` sizing with nothing else in the batch."""
    n = min(cfg.chunked_prefill_size, baseline)
    forced = n <= 0
    if forced:
        n = cfg.chunked_prefill_size
    if seq_len - done > n:
        end = done + n
        if cfg.align_size:
            aligned = end // cfg.align_size * cfg.align_size
            end = aligned if aligned > done else end
        return end, forced
    return seq_len, forced


def _silent_round(cfg: Config, chunked, base_end: Prov | None, index: int, time, block, until=None):
    """One round in which the chunked request resumed alone and printed nothing, sized by
    the model's ``add_chunked_req`` rule from the baseline the last known round left.

    Returns (round, chunked after it, baseline after it, end past ``until`` or None)."""
    rid, seq, done = chunked
    b = base_end.value if base_end else 0
    end, forced = _chunk_step(cfg, done, seq, b)
    overshoot = None
    if until is not None and end > until:
        overshoot, end = end, until
    rule = (
        "forced branch: rem_chunk_tokens taken"
        if forced
        else f"min(chunk {cfg.chunked_prefill_size}, rem_total {b})"
    )
    evid = [
        f"{rule}, end aligned down to {cfg.align_size} unless that reaches the start",
        f"baseline {b} assumed unchanged since the last known round (no KV transfer ended)",
    ]
    if block and end // block == done // block:
        evid.append(
            f"no AttentionStore write expected: [{done}, {end}) stays inside block {done // block}"
        )
    r = Round(index, time)
    r.pieces.append(Piece(rid, done, end, "resumed", INFERRED, evid))
    pages = cfg.pages_for(done, end)
    after = Prov(b - pages, INFERRED, [f"{b} - {pages} allocated"])
    r.baseline = Prov(b, INFERRED, list(evid[1:2]))
    r.baseline_end = after
    return r, ((rid, seq, end) if end < seq else None), after, overshoot


def _first_start(cfg: Config, chunked, base_end: Prov | None, spent: int) -> int | None:
    """Walking the chunked request forward with the model (silent rounds, baseline as the
    last known round left it), the first start from which its non-last piece is ``spent``
    tokens once page-ceiled. None when the walk never gives one."""
    _, seq, d = chunked
    b = base_end.value if base_end else 0
    while d < seq:
        end, _ = _chunk_step(cfg, d, seq, b)
        if end < seq and cfg.ceil_page(end - d) == spent:
            return d
        b -= cfg.pages_for(d, end)
        d = end
    return None


def _resumed_end(cfg: Config, start: int, spent: int) -> int | None:
    """The end of a non-last resumed piece from ``start`` whose page-ceiled length is
    ``spent``: aligned down to the checkpoint align unless that would reach the start.
    None when no such piece exists (so it must have started elsewhere)."""
    page, align = cfg.page_size, cfg.align_size
    for n in range(spent, max(spent - page, 0), -1):  # raw lengths with that ceiling
        end = start + n
        if align:
            aligned = end // align * align
            end = aligned if aligned > start else end
        if cfg.ceil_page(end - start) == spent:
            return end
    return None


def _oom_in_logged_round(rnd: Round) -> None:
    """The request the out-of-memory is pinned on, as the scheduler reports it: the resumed
    chunk if any, else the batch's last piece. Nothing was allocated, so no baseline after."""
    resumed = [p for p in rnd.pieces if p.kind == "resumed"]
    victim = (resumed or rnd.pieces or [None])[-1 if not resumed else 0]
    rnd.oom["round"] = rnd.index
    rnd.oom["rid"] = victim.rid if victim is not None else None
    rnd.baseline_end = None


def _oom_start(cfg: Config, chunked, base_end: Prov | None, tokens: int) -> tuple[int, bool]:
    """Where the out-of-memory piece of the chunked request starts: the first point of a
    walk with the model's ``add_chunked_req`` sizing (baseline as the last known round left
    it) from which the piece is ``tokens`` long. Each step before it is a silent round the
    evidence requires; a forced step cannot be one (it would have run out of memory
    itself), so the walk stops there.

    Returns (start, found); when no step gives ``tokens``, the start of the step where the
    model itself runs out of memory (the last known end when it never does), not found."""
    _, seq, d = chunked
    b = base_end.value if base_end else 0
    while d < seq:
        end, forced = _chunk_step(cfg, d, seq, b)
        if end - d == tokens:
            return d, True
        if forced:
            return d, False
        b -= cfg.pages_for(d, end)
        d = end
    return chunked[2], False


def _move_bracketed_end(cfg: Config, out: list[Round], chunked, tokens: int, avail: int):
    """When the last silent round's end is only bracketed by its AttentionStore write, the
    out-of-memory piece may start anywhere in the bracket: the first point from which
    ``add_chunked_req`` with the crash's baseline ``avail`` gives ``tokens``, and that the
    round itself reaches from ``avail`` + its pages, is its end.
    Returns that point (the round's piece is moved there), or None."""
    last = out[-1] if out else None
    p = last.pieces[-1] if last and last.pieces else None
    if p is None or p.interval_end is None or p.end != chunked[2] or last.oom is not None:
        return None
    _, seq, _ = chunked
    lo, hi = p.interval_end
    for s in range(max(lo, p.start + 1), min(hi, seq) + 1):
        if _chunk_step(cfg, s, seq, avail)[0] - s != tokens:
            continue
        # and the round itself must be what the baseline the crash implies gave
        if _chunk_step(cfg, p.start, seq, avail + cfg.pages_for(p.start, s))[0] == s:
            base = last.baseline.value if last.baseline else 0
            p.end = s
            p.evidence.append(f"end {s}: where the out-of-memory piece of {tokens} tokens starts")
            last.baseline_end = Prov(base - cfg.pages_for(p.start, s), INFERRED,
                                     [f"{base} - {cfg.pages_for(p.start, s)} allocated"])
            return s
    return None


def _pinned_start(cfg: Config, chunked, tokens: int, avail: int) -> int | None:
    """The start of the out-of-memory piece when the baseline the last round left is not
    what the walk assumed: the line's ``avail`` is the baseline at the crash, so the piece
    is what ``add_chunked_req`` gives from it, after at most one silent round that the
    baseline ``avail`` + its pages sized. The first such start, or None."""
    _, seq, done = chunked
    if _chunk_step(cfg, done, seq, avail)[0] - done == tokens:
        return done
    for s in range(done + 1, min(seq, done + cfg.chunked_prefill_size) + 1):
        if _chunk_step(cfg, s, seq, avail)[0] - s != tokens:
            continue
        if _chunk_step(cfg, done, seq, avail + cfg.pages_for(done, s))[0] == s:
            return s
    return None


def _silent_tail(out: list[Round]) -> list[Round]:
    """The rounds after the last one with an observed baseline, oldest first."""
    k = len(out)
    while k > 0 and not (out[k - 1].baseline and out[k - 1].baseline.provenance == OBSERVED):
        k -= 1
    return out[k:]


def _sizes(cfg: Config, piece: Piece, seq: int, base: int) -> bool:
    """Does ``add_chunked_req`` from baseline ``base`` give this piece?"""
    return _chunk_step(cfg, piece.start, seq, base)[0] == piece.end


def _reconcile_oom(cfg: Config, out: list[Round], seq: int, shrinks: dict, drops: list) -> None:
    """The out-of-memory line prints what was left (free + evictable) when the chunked
    request resumed alone: an observed baseline. Below what the rounds since the last
    observed one leave, the difference was taken outside the adder. Walking back from it
    (adding each silent round's pages back) gives the baselines the pieces ran with; the
    fall is placed at the first round whose piece needs it, after the last one whose piece
    the lower baseline could not have given."""
    oom_rnd = out[-1]
    if oom_rnd.decisions or not oom_rnd.oom or oom_rnd.oom.get("available") is None:
        return
    avail, left = oom_rnd.oom["available"], oom_rnd.baseline
    if left is None or left.value is None or left.value - avail < cfg.page_size:
        return
    tail = _silent_tail(out[:-1])
    if not tail:
        return
    fall = left.value - avail
    where_oom = oom_rnd.oom.get("where", "the out-of-memory line")
    back = avail
    consistent: list[tuple[Round, int]] = []
    for r in reversed(tail):
        p = r.pieces[0] if len(r.pieces) == 1 and r.pieces[0].kind == "resumed" else None
        if p is None:
            break
        back += cfg.pages_for(p.start, p.end)
        if not _sizes(cfg, p, seq, back):
            break
        consistent.append((r, back))
    if not consistent:
        return
    consistent.reverse()
    shown = [r for r, _ in consistent if r.index in shrinks]
    at = shown[0].index if shown else oom_rnd.index
    earliest = consistent[0][0].index
    for r, base in consistent:
        if r.index >= at:
            r.baseline = Prov(base, DERIVED, [f"{avail} available at {where_oom} plus the "
                                              "pages of the pieces allocated since"])
            r.baseline_end = Prov(base - cfg.pages_for(r.pieces[0].start, r.pieces[0].end),
                                  DERIVED, [f"walked back from {where_oom}"])
            shrinks.pop(r.index, None)
    oom_rnd.baseline = Prov(avail, DERIVED, [f"{avail} available at {where_oom}: the chunk "
                                             "resumed alone, nothing else was allocated"])
    drops.append(Drop(earliest - 1, at, fall, (fall, fall), [
        f"{where_oom}: {avail} available where the rounds since round {earliest - 1} leave "
        f"{left.value} ({'; '.join(left.evidence)})",
        f"pieces of rounds {earliest}..{oom_rnd.index - 1} are what the lower baseline gives; "
        f"round {at} is the first that needs it",
    ]))


def _shrink_drops(cfg: Config, out: list[Round], shrinks: dict) -> list[Drop]:
    """Silent rounds whose AS write ends before what the assumed baseline allows, with no
    out-of-memory line to pin it: the baseline was lower, by an amount the piece brackets
    (its end is where ``min(chunk, rem_total)`` landed after alignment)."""
    found = []
    observed = [r.index for r in out if r.baseline and r.baseline.provenance == OBSERVED]
    for idx, (model_end, lo, hi) in sorted(shrinks.items()):
        if any(o > idx for o in observed):
            continue  # a later observed baseline measures the fall exactly (continuity)
        r = out[idx] if idx < len(out) else None
        if r is None or not r.pieces or r.baseline is None or r.baseline.value is None:
            continue
        p, b = r.pieces[0], r.baseline.value
        step = max(cfg.align_size, cfg.page_size)
        most_left = hi - p.start + step - 1  # the largest rem_total that lands inside [lo, hi]
        least, most = max(b - most_left, 0), b - (lo - p.start)
        found.append(Drop(idx - 1, idx, least, (least, most), [
            f"round {idx}: {p.rid}'s AttentionStore write puts its end in [{lo}, {hi}], where "
            f"a baseline of {b} gives {model_end}",
        ]))
    return found


def _impossible_baselines(cfg: Config, out: list[Round], contradictions: list) -> None:
    """A baseline below 0 or above the pool is a contradiction, never a rebuilt value."""
    for r in out:
        for name in ("baseline", "baseline_end"):
            v = getattr(r, name)
            if v is not None and v.value is not None and not 0 <= v.value <= cfg.pool_size:
                contradictions.append({
                    "round": r.index,
                    "what": name,
                    "detail": f"the rebuilt {name.replace('_', ' ')} {v.value} is outside the "
                    f"pool [0, {cfg.pool_size}] ({'; '.join(v.evidence)})",
                })
                setattr(r, name, None)


def rebuild_rounds(
    events: pl.DataFrame, cfg: Config, config: dict[str, Prov], rank: str | None = None
) -> Rebuild:
    ev = events.filter(pl.col("kind").is_in(KINDS))
    deciding = deciding_rank(events, rank)
    rows = ev.filter(pl.col("rank") == deciding).sort(["file", "line"]).to_dicts()
    rounds, oom = _segment(rows, cfg)
    contradictions: list[dict] = []
    drops: list = []
    first_write = next((r for r in rows if r["kind"] == "as_write"), None)
    block = first_write["block_size"] if first_write else None
    if first_write is not None:
        config = {**config, "as_block_size": Prov(block, OBSERVED, [where(first_write)])}

    seq_lens: dict[str, int] = {}
    #: silent rounds whose AS write ends before the model's sizing: round -> (model, lo, hi)
    shrinks: dict[int, tuple[int, int, int]] = {}
    chunked: tuple[str, int, int] | None = None  # rid, seq_len, done
    base_end: Prov | None = None
    out: list[Round] = []

    def gap_rounds(until: int, next_time, *, stop=None) -> None:
        """Silent rounds of the chunked request between its known end and ``until`` (or
        until ``stop(done)`` says the next known piece starts here)."""
        nonlocal chunked, base_end
        while chunked and chunked[2] < until and not (stop and stop(chunked[2])):
            r, chunked, base_end, over = _silent_round(
                cfg, chunked, base_end, len(out), next_time, block, until
            )
            if over is not None:
                # Shorter than the assumed baseline allows: memory went somewhere unseen.
                shrinks[len(out)] = (over, until, until)
            out.append(r)

    for rnd in rounds:
        rnd.index = len(out)
        if rnd.decisions:
            first = rnd.decisions[0]
            if chunked and first.rem_chunk_tokens == cfg.chunked_prefill_size:
                # The full budget is left: the chunked request finished in rounds that
                # printed nothing (alone in the batch, its waiting queue skipped).
                gap_rounds(chunked[1], rnd.time)
                rnd.index = len(out)
            if chunked:
                rid, seq, done = chunked
                spent = cfg.chunked_prefill_size - first.rem_chunk_tokens
                # The two offsets at the first check tell whether the resumed piece was the
                # last one: only a last piece also promises its first token to later rounds.
                promised = (first.baseline - first.rem_total_tokens) - (
                    first.baseline - first.cur_rem_tokens
                )
                if promised == cfg.max_new_tokens and cfg.ceil_page(seq - done) != spent:
                    # Silent rounds came first; the last piece is the one whose page-ceiled
                    # length the chunk budget shows.
                    gap_rounds(
                        seq,
                        rnd.time,
                        stop=lambda d, seq=seq, spent=spent: cfg.ceil_page(seq - d) <= spent,
                    )
                    rnd.index = len(out)
                    rid, seq, done = chunked if chunked else (rid, seq, done)
                elif promised != cfg.max_new_tokens:
                    # A non-last piece of this size: where the model's own sizing first gives
                    # one is where it starts; the rounds before it printed nothing.
                    start = _first_start(cfg, chunked, base_end, spent)
                    if start is not None:
                        gap_rounds(seq, rnd.time, stop=lambda d, start=start: d >= start)
                    elif _resumed_end(cfg, done, spent) is None:
                        gap_rounds(
                            seq,
                            rnd.time,
                            stop=lambda d, spent=spent: _resumed_end(cfg, d, spent) is not None,
                        )
                    rnd.index = len(out)
                    rid, seq, done = chunked if chunked else (rid, seq, done)
                if cfg.ceil_page(seq - done) == spent:
                    end = seq
                else:
                    end = _resumed_end(cfg, done, spent) or _chunk_step(cfg, done, seq, spent)[0]
                # Silent rounds may sit between the last known piece and this one.
                if cfg.ceil_page(end - done) != spent:
                    contradictions.append(
                        {
                            "round": rnd.index,
                            "what": "resumed piece",
                            "detail": f"rem_chunk_tokens {first.rem_chunk_tokens} at {first.where} does not follow from resuming {rid} at {done}",
                        }
                    )
                rnd.pieces.append(
                    Piece(
                        rid,
                        done,
                        end,
                        "resumed",
                        DERIVED,
                        [
                            f"chunk budget spent before the first check: {cfg.chunked_prefill_size} - {first.rem_chunk_tokens} = {spent} ({first.where})"
                        ],
                    )
                )
                chunked = (rid, seq, end) if end < seq else None
            for d in rnd.decisions:
                seq_lens[d.rid] = d.seq_len
                if d.decision in ("full", "truncated") and d.start is not None:
                    rnd.pieces.append(Piece(d.rid, d.start, d.end, "new", OBSERVED, [d.where]))
                    if d.decision == "truncated":
                        chunked = (d.rid, d.seq_len, d.end)
            rnd.baseline = Prov(first.baseline, OBSERVED, [first.where])
            last = rnd.decisions[-1]
            loaded = last.load_back_slots(cfg)
            alloc = sum(cfg.pages_for(p.start, p.end) for p in rnd.pieces)
            base_end = Prov(
                last.baseline - loaded - alloc,
                DERIVED,
                [f"{last.baseline} ({last.where}) - load-back {loaded} - {alloc} allocated"],
            )
            rnd.baseline_end = base_end
            out.append(rnd)
        elif rnd.as_writes and not rnd.oom:
            # A forward with no adder line: the chunked request resumed alone.
            rid_w = [r for r, _, _ in rnd.as_writes]
            if not chunked or chunked[0] not in rid_w:
                contradictions.append(
                    {
                        "round": len(out),
                        "what": "AttentionStore write",
                        "detail": f"writes for {rid_w} ({rnd.as_writes[0][2]}) in a round without adder lines, but no chunked request is known",
                    }
                )
                continue
            rid, seq, done = chunked
            blocks = next(b for r, b, _ in rnd.as_writes if r == rid)
            w = next(x for r, _, x in rnd.as_writes if r == rid)
            lo, hi = blocks * block, min(seq, blocks * block + block - 1)
            # Pieces that stayed inside one block wrote nothing: silent rounds before this.
            while chunked and chunked[2] < lo:
                b = base_end.value if base_end else 0
                step_end, _ = _chunk_step(cfg, chunked[2], seq, b)
                if step_end >= lo or step_end // block != chunked[2] // block:
                    break
                gap_rounds(step_end, rnd.time)
            rid, seq, done = chunked if chunked else (rid, seq, done)
            rnd.index = len(out)
            b = base_end.value if base_end else 0
            end, forced = _chunk_step(cfg, done, seq, b)
            evid = [
                f"AttentionStore write blocks={blocks} ({w}): end in [{lo}, {hi}]",
                f"min(chunk {cfg.chunked_prefill_size}, rem_total {b}) with end aligned down to {cfg.align_size}",
                f"baseline {b} assumed unchanged since the last known round (no KV transfer ended)",
            ]
            if not lo <= end <= hi:
                if end > hi:
                    # Shorter than the baseline allows: memory went somewhere unseen.
                    shrinks[len(out)] = (end, lo, hi)
                else:
                    contradictions.append(
                        {
                            "round": len(out),
                            "what": "silent round",
                            "detail": f"model gives end {end} for {rid}, AS write says [{lo}, {hi}]: memory was freed in between?",
                        }
                    )
                end = lo if lo > done else hi
            rnd.pieces.append(
                Piece(rid, done, end, "resumed", INFERRED, evid, interval_end=(lo, hi))
            )
            pages = cfg.pages_for(done, end)
            rnd.baseline = Prov(b, INFERRED, evid[2:])
            base_end = Prov(b - pages, INFERRED, [f"{b} - {pages} allocated"])
            rnd.baseline_end = base_end
            chunked = (rid, seq, end) if end < seq else None
            rnd.index = len(out)
            out.append(rnd)
        if rnd.oom is not None:
            # an out-of-memory without its size says only that it happened
            if chunked and rnd not in out and rnd.oom["tokens"] is not None:
                rid, seq, done = chunked
                tokens = rnd.oom["tokens"]
                start, placed = _oom_start(cfg, chunked, base_end, tokens)
                if not placed and rnd.oom.get("available") is not None:
                    avail = rnd.oom["available"]
                    moved = _move_bracketed_end(cfg, out, chunked, tokens, avail)
                    if moved is not None:
                        chunked, base_end = (rid, seq, moved), out[-1].baseline_end
                    pinned = moved if moved is not None else _pinned_start(
                        cfg, chunked, tokens, avail
                    )
                    if pinned is not None:
                        start, placed = pinned, True
                if not placed:
                    contradictions.append(
                        {
                            "round": len(out),
                            "what": "out of memory",
                            "detail": f"'Try to allocate {tokens} tokens' is no piece the model "
                            f"gives {rid} after {done} (seq_len {seq}); placed where the model "
                            f"runs out of memory, at {start}",
                        }
                    )
                gap_rounds(start, rnd.time)
                rnd.index = len(out)
                b = base_end.value if base_end else 0
                end = min(start + tokens, seq)
                forced = b <= 0
                rnd.pieces.append(
                    Piece(
                        rid,
                        start,
                        end,
                        "resumed",
                        DERIVED,
                        [
                            f"out of memory 'Try to allocate {tokens} tokens' ({rnd.oom['where']}): "
                            f"the piece [{start}, {start} + {tokens})"
                            + (", its last" if end == seq else f", not its last (seq_len {seq})"),
                            "forced branch: rem_total_tokens <= 0" if forced else
                            f"min(chunk {cfg.chunked_prefill_size}, rem_total {b})",
                        ],
                    )
                )
                rnd.baseline = base_end
                rnd.oom["rid"] = rid
                rnd.oom["round"] = rnd.index
                chunked = None  # the scheduler process exits here
                out.append(rnd)
                if placed:  # a contradicted piece says nothing about the baseline
                    _reconcile_oom(cfg, out, seq, shrinks, drops)
            elif rnd not in out:
                rnd.index = len(out)
                out.append(rnd)
                rnd.oom["round"] = rnd.index
            else:
                # The batch this round's adder decided could not be allocated.
                _oom_in_logged_round(rnd)
                chunked = None
    if oom is not None and "round" not in oom:
        oom["round"] = out[-1].index if out else None
    for i, r in enumerate(out):
        r.index = i
    drops.extend(_shrink_drops(cfg, out, shrinks))
    _impossible_baselines(cfg, out, contradictions)
    rb = Rebuild(cfg, config, out, oom, contradictions, block, deciding, seq_lens, drops=drops)
    rb.pending = (chunked, base_end) if chunked and oom is None else None
    return rb
