"""Reconciling the walk with the evidence that brackets it: the out-of-memory line (its
piece, its availability, the tree dump after it), the AttentionStore writes that bound a
silent piece's end, and the baselines no pool can hold. Pure functions of the rounds and
the walk's state; the ``Rebuilder`` (``rebuild.py``) calls them.
"""

from __future__ import annotations

from kvforensics.model import Config
from kvforensics.rounds.drop import Drop
from kvforensics.rounds.provenance import DERIVED, INFERRED, OBSERVED, Prov
from kvforensics.rounds.records import Contradiction, LoggedOom, Piece, Round
from kvforensics.rounds.walk import Chunked, baseline_value, chunk_step

#: silent rounds whose AttentionStore write ends before the model's sizing: round ->
#: (the model's end, lo, hi)
Shrinks = dict[int, tuple[int, int, int]]


def oom_in_logged_round(rnd: Round, oom: LoggedOom) -> LoggedOom:
    """The request the out-of-memory is pinned on, as the scheduler reports it: the resumed
    chunk if any, else the batch's last piece. Nothing was allocated, so no baseline after.
    Returns the out-of-memory as placed (``rnd``'s now)."""
    resumed = [p for p in rnd.pieces if p.kind == "resumed"]
    victim = resumed[0] if resumed else rnd.pieces[-1] if rnd.pieces else None
    rnd.oom = placed = oom.placed(rnd.index, victim.rid if victim is not None else None)
    rnd.baseline_end = None
    return placed


def walk_to_oom(
    cfg: Config,
    chunked: Chunked,
    base_end: Prov | None,
    tokens: int,
    limit: int,
    avail: int | None,
) -> tuple[int, bool]:
    """Where the out-of-memory piece of the chunked request starts: the first point of a
    walk with the model's ``add_chunked_req`` sizing (baseline as the last known round left
    it) from which the piece is ``tokens`` long. Each step before it is a silent round the
    evidence requires; a forced step cannot be one (it would have run out of memory
    itself), so the walk stops there.

    Two steps may give the same size (a small piece from the last few slots, then the
    forced last piece of that size): the one whose baseline is the line's ``avail`` (what
    was left when the crashing piece asked) is it; else the first.

    Returns (start, found); when no step gives ``tokens``, the start of the step where the
    model itself runs out of memory (the last known end when it never does), not found.
    At most ``limit`` steps (the silent rounds the time span allows; every step advances
    at least one token, so ``seq - done`` bounds the walk in any case)."""
    seq, d = chunked.seq_len, chunked.done
    b = baseline_value(base_end)
    first: int | None = None
    stop = chunked.done  # where the walk says the model runs out (the known end: never)
    for _ in range(min(seq - d, limit)):
        end, forced = chunk_step(cfg, d, seq, b)
        if end - d == tokens:
            if avail is None or b == avail:
                return d, True
            first = d if first is None else first
        if forced:
            stop = d
            break
        if end >= seq:
            break
        b -= cfg.pages_for(d, end)
        d = end
    return (first, True) if first is not None else (stop, False)


def tree_start(
    cfg: Config, chunked: Chunked, base_end: Prov | None, oom: LoggedOom, limit: int
) -> int | None:
    """Where the out-of-memory piece starts by the tree dump after the message: the
    chunked request's computed prefix is a locked path there, so the crash piece starts
    at one of the tree's locked path lengths. Among the starts the model's walk reaches
    from the last known end (every silent round's piece as the assumed baseline sizes
    it), the one the tree shows, from which the line's availability gives the logged
    piece; None when the tree shows none of them, or more than one."""
    tokens, avail = oom.tokens, oom.available
    if not oom.tree_paths or tokens is None or avail is None:
        return None
    seq, d, b = chunked.seq_len, chunked.done, baseline_value(base_end)
    found: list[int] = []
    for _ in range(min(seq - d, limit) + 1):
        if d in oom.tree_paths and chunk_step(cfg, d, seq, avail)[0] - d == tokens:
            found.append(d)
        end, forced = chunk_step(cfg, d, seq, b)
        if forced or end >= seq:
            break  # a forced step would have run out of memory itself
        b, d = b - cfg.pages_for(d, end), end
    return found[0] if len(found) == 1 else None


def move_bracketed_end(
    cfg: Config, out: list[Round], chunked: Chunked, tokens: int, avail: int
) -> int | None:
    """When the last silent round's end is only bracketed by its AttentionStore write, the
    out-of-memory piece may start anywhere in the bracket: the first point from which
    ``add_chunked_req`` with the crash's baseline ``avail`` gives ``tokens``, and that the
    round itself reaches from ``avail`` + its pages, is its end.
    Returns that point (the round's piece is moved there), or None."""
    last = out[-1] if out else None
    p = last.pieces[-1] if last and last.pieces else None
    if last is None or p is None or p.interval_end is None or p.end != chunked.done or last.oom is not None:
        return None
    seq = chunked.seq_len
    lo, hi = p.interval_end
    # the round's piece is at most one chunk: that, the block and the request bound the scan
    for s in range(max(lo, p.start + 1), min(hi, seq, p.start + cfg.chunked_prefill_size) + 1):
        if chunk_step(cfg, s, seq, avail)[0] - s != tokens:
            continue
        # and the round itself must be what the baseline the crash implies gave
        if chunk_step(cfg, p.start, seq, avail + cfg.pages_for(p.start, s))[0] == s:
            base = baseline_value(last.baseline)
            p.end = s
            p.evidence.append(f"end {s}: where the out-of-memory piece of {tokens} tokens starts")
            last.baseline_end = Prov(base - cfg.pages_for(p.start, s), INFERRED,
                                     [f"{base} - {cfg.pages_for(p.start, s)} allocated"])
            return s
    return None


def pinned_start(cfg: Config, chunked: Chunked, tokens: int, avail: int) -> int | None:
    """The start of the out-of-memory piece when the baseline the last round left is not
    what the walk assumed: the line's ``avail`` is the baseline at the crash, so the piece
    is what ``add_chunked_req`` gives from it, after at most one silent round that the
    baseline ``avail`` + its pages sized. The first such start, or None."""
    seq, done = chunked.seq_len, chunked.done
    if chunk_step(cfg, done, seq, avail)[0] - done == tokens:
        return done
    for s in range(done + 1, min(seq, done + cfg.chunked_prefill_size) + 1):
        if chunk_step(cfg, s, seq, avail)[0] - s != tokens:
            continue
        if chunk_step(cfg, done, seq, avail + cfg.pages_for(done, s))[0] == s:
            return s
    return None


def silent_tail(out: list[Round]) -> list[Round]:
    """The rounds after the last one with an observed baseline, oldest first."""
    k = len(out)
    while k > 0:
        base = out[k - 1].baseline
        if base is not None and base.provenance == OBSERVED:
            break
        k -= 1
    return out[k:]


def sizes_piece(cfg: Config, piece: Piece, seq: int, base: int) -> bool:
    """Does ``add_chunked_req`` from baseline ``base`` give this piece?"""
    return chunk_step(cfg, piece.start, seq, base)[0] == piece.end


def reconcile_oom(
    cfg: Config, out: list[Round], seq: int, shrinks: Shrinks, drops: list[Drop]
) -> None:
    """The out-of-memory line prints what was left (free + evictable) when the chunked
    request resumed alone: an observed baseline. Below what the rounds since the last
    observed one leave, the difference was taken outside the adder. Walking back from it
    (adding each silent round's pages back) gives the baselines the pieces ran with; the
    fall is placed at the first round whose piece needs it, after the last one whose piece
    the lower baseline could not have given."""
    oom_rnd = out[-1]
    if oom_rnd.decisions or not oom_rnd.oom or oom_rnd.oom.available is None:
        return
    avail, left = oom_rnd.oom.available, oom_rnd.baseline
    if left is None or left.value is None or left.value - avail < cfg.page_size:
        return
    tail = silent_tail(out[:-1])
    if not tail:
        return
    fall = left.value - avail
    where_oom = oom_rnd.oom.where or "the out-of-memory line"
    back = avail
    consistent: list[tuple[Round, int]] = []
    for r in reversed(tail):
        p = r.pieces[0] if len(r.pieces) == 1 and r.pieces[0].kind == "resumed" else None
        if p is None:
            break
        back += cfg.pages_for(p.start, p.end)
        if not sizes_piece(cfg, p, seq, back):
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


def shrink_drops(cfg: Config, out: dict[int, Round], shrinks: Shrinks) -> list[Drop]:
    """Silent rounds whose AS write ends before what the assumed baseline allows, with no
    out-of-memory line to pin it: the baseline was lower, by an amount the piece brackets
    (its end is where ``min(chunk, rem_total)`` landed after alignment)."""
    found = []
    observed = [r.index for r in out.values() if r.baseline and r.baseline.provenance == OBSERVED]
    for idx, (model_end, lo, hi) in sorted(shrinks.items()):
        if any(o > idx for o in observed):
            continue  # a later observed baseline measures the fall exactly (continuity)
        r = out.get(idx)
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


def impossible_baselines(cfg: Config, out: list[Round], contradictions: list[Contradiction]) -> None:
    """A baseline below 0 or above the pool is a contradiction, never a rebuilt value."""
    for r in out:
        for name in ("baseline", "baseline_end"):
            v = getattr(r, name)
            if v is not None and v.value is not None and not 0 <= v.value <= cfg.pool_size:
                contradictions.append(Contradiction(
                    r.index,
                    name,
                    f"the rebuilt {name.replace('_', ' ')} {v.value} is outside the "
                    f"pool [0, {cfg.pool_size}] ({'; '.join(v.evidence)})",
                ))
                setattr(r, name, None)
