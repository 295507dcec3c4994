"""Walking the chunked request forward with the model's sizing: the rounds that printed
nothing, each piece what ``add_chunked_req`` gives from the baseline the last known round
left, and the inverse rules that say which baseline gives a piece the evidence shows.
Pure functions of the configuration and the walk's state (``Chunked``, a baseline); the
``Rebuilder`` (``rebuild.py``) decides when each applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from mypy_extensions import mypyc_attr

from kvforensics.model import Config, sizing
from kvforensics.rounds.provenance import INFERRED, Prov
from kvforensics.rounds.records import Decision, Piece, Round

#: The most rounds a node runs in a second: every round is at least one forward of the
#: model, and none takes under a millisecond. It bounds the silent rounds the rebuild may
#: infer between two timed lines (their times, plus the 1 s the timestamps resolve): a
#: walk that needs more contradicts the log's time span instead of running on.
MAX_ROUNDS_PER_SECOND = 1000


# compiled, a plain class: pickle (a byte-range worker's boundary holds one) cannot set
# a native frozen dataclass's fields
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class Chunked:
    """The request being chunked: its rid, prompt length and the tokens computed so far.

    A piece the rebuild sizes itself leaves it unfinished (``done < seq_len``: a piece
    that reaches ``seq_len`` ends the chunking); one a log's truncation names is taken as
    the log says it."""

    rid: str
    seq_len: int
    done: int

    def __post_init__(self) -> None:
        # the reader drops negative counts, and every piece ends at or after its start
        assert self.done >= 0, self


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class Pending:
    """The request still chunked when a log ends, and the baseline its last round left."""

    chunked: Chunked
    base_end: Prov | None


def baseline_value(p: Prov | None) -> int:
    """A baseline's number; 0 when unknown."""
    return p.value if p is not None and p.value is not None else 0


def first_lock(cfg: Config, rnd: Round, before: Prov | None) -> Prov | None:
    """The first check's lock, where the evidence bounds it. Its line is printed with its
    device prefix locked; the resumed chunk was sized before that lock, and the fork asks
    ``add_one_req`` at all only when the budget state after the chunk was CONTINUE
    (``rem_total_tokens`` and ``cur_rem_tokens`` both above 0). A line that shows either at
    or below 0 after a resumed chunk therefore says the lock took at least enough to make
    up the difference, in whole pages, and at most the prefix. Within those bounds, the
    fall from the baseline the previous round left (``before``) is the lock's size where
    it is one; else the least. None when the line says nothing of it."""
    first = rnd.decisions[0]
    shown = min(first.rem_total_tokens, first.cur_rem_tokens)
    if shown > 0 or first.prefix_len <= 0 or not any(p.kind == "resumed" for p in rnd.pieces):
        return None
    least = min(cfg.ceil_page(1 - shown), first.prefix_len)
    fell = None if before is None or before.value is None else before.value - first.baseline
    took = fell if fell is not None and least <= fell <= first.prefix_len else least
    why = (
        f"; the baseline fell {fell} from the {before.value} the previous round left"
        if took == fell and before is not None and took != least else ""
    )
    return Prov(took, INFERRED, [
        f"{first.where}: rem_total_tokens {first.rem_total_tokens}, cur_rem_tokens "
        f"{first.cur_rem_tokens} after the resumed chunk, yet add_one_req ran: {first.rid}'s "
        f"prefix lock took at least {least} (at most its prefix {first.prefix_len}) before "
        f"the line was printed{why}",
    ], (least, first.prefix_len))  # fmt: skip


def lock_released(cfg: Config, decisions: list[Decision], first_lock: Prov | None) -> int:
    """What the last check's refused request gave back: its check line is printed after
    it locked its device prefix, and a refusal releases that lock (the lock is held only
    while ``add_one_req`` decides). Between two checks of a round the baseline falls only
    by the earlier one's load-back and the later one's lock, so the lock is that fall; a
    refused first check gives back what the evidence shows its lock took (else 0)."""
    last = decisions[-1]
    if last.decision != "rejected" or not last.prefix_len:
        return 0
    if len(decisions) < 2:
        return first_lock.value if first_lock and first_lock.value else 0
    prev = decisions[-2]
    fell = prev.baseline - prev.load_back_slots(cfg) - last.baseline
    return max(0, min(fell, last.prefix_len))


def chunk_step(cfg: Config, done: int, seq_len: int, baseline: int) -> tuple[int, bool]:
    """The model's ``add_chunked_req`` sizing with nothing else in the batch."""
    size = sizing.resumed_piece(done, seq_len, cfg.chunked_prefill_size, baseline, cfg.align_size)
    return size.end, size.forced


def silent_round(
    cfg: Config,
    chunked: Chunked,
    base_end: Prov | None,
    index: int,
    time: datetime | None,
    block: int | None,
    until: int | None = None,
) -> tuple[Round, Chunked | None, Prov, int | None]:
    """One round in which the chunked request resumed alone and printed nothing, sized by
    the model's ``add_chunked_req`` rule from the baseline the last known round left.

    Returns (round, chunked after it, baseline after it, end past ``until`` or None)."""
    rid, seq, done = chunked.rid, chunked.seq_len, chunked.done
    b = baseline_value(base_end)
    end, forced = chunk_step(cfg, done, seq, b)
    overshoot = None
    if until is not None and end > until:
        rose = forced_rise(cfg, chunked, b, until) if forced else None
        if rose is not None:
            return risen_round(cfg, chunked, rose, index, time, until)
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
    return r, (Chunked(rid, seq, end) if end < seq else None), after, overshoot


def forced_rise(cfg: Config, chunked: Chunked, b: int, end: int) -> Prov | None:
    """A piece shorter than the forced branch takes, from a baseline <= 0: less memory
    cannot shorten a forced piece (it takes the whole chunk budget whatever is left), so
    memory came back before the round (a KV transfer ended). The least baseline that gives
    the piece ending at ``end``, bounded by the most; None when no baseline gives it."""
    got = baselines_for(cfg, chunked.done, chunked.seq_len, end, end, b)
    if got is None:
        return None
    return risen(got, chunked.rid, end, f"the baseline {b} the last known round left takes "
                 "the forced branch (the whole chunk budget)")  # fmt: skip


def risen(within: tuple[int, int], rid: str, end: int, why: str, told: str = "") -> Prov:
    """The baseline a silent round rose to where memory came back (a KV transfer ended):
    the least of ``within`` (least, most) that gives ``rid``'s piece ending at ``end``,
    bounded by the most; ``why`` says what the walk assumed instead, ``told`` what pinned
    the end (else empty)."""
    least, most = within
    return Prov(least, INFERRED, [
        f"{told}at least {least} (at most {most}) for {rid}'s piece to end at {end}, where "
        f"{why}: memory came back since (a KV transfer ended)",
    ], (least, most))  # fmt: skip


def risen_round(
    cfg: Config, chunked: Chunked, rose: Prov, index: int, time: datetime | None, end: int
) -> tuple[Round, Chunked | None, Prov, int | None]:
    """A silent round of the chunked request ending at ``end`` from the baseline ``rose``
    (memory came back before it). Returns as ``silent_round`` does."""
    rid, seq, done = chunked.rid, chunked.seq_len, chunked.done
    b = baseline_value(rose)
    assert chunk_step(cfg, done, seq, b)[0] == end, "the risen baseline gives the piece"
    r = Round(index, time)
    r.pieces.append(Piece(rid, done, end, "resumed", INFERRED, [
        f"min(chunk {cfg.chunked_prefill_size}, rem_total {b}), end aligned down to "
        f"{cfg.align_size} unless that reaches the start", *rose.evidence,
    ]))  # fmt: skip
    pages = cfg.pages_for(done, end)
    after = Prov(b - pages, INFERRED, [f"{b} - {pages} allocated"])
    r.baseline, r.baseline_end = rose, after
    return r, (Chunked(rid, seq, end) if end < seq else None), after, None


def first_start(
    cfg: Config, chunked: Chunked, base_end: Prov | None, spent: int, limit: int
) -> int | None:
    """Walking the chunked request forward with the model (silent rounds, baseline as the
    last known round left it), the first start from which its non-last piece is ``spent``
    tokens once page-ceiled. None when the walk never gives one within ``limit`` steps
    (the silent rounds the log's time span allows; each step also advances at least one
    token, so ``seq - done`` bounds it without times)."""
    seq, d = chunked.seq_len, chunked.done
    b = baseline_value(base_end)
    for _ in range(min(seq - d, limit)):
        end, _ = chunk_step(cfg, d, seq, b)
        if end < seq and cfg.ceil_page(end - d) == spent:
            return d
        b -= cfg.pages_for(d, end)
        d = end
    return None


def walk_below(
    cfg: Config, chunked: Chunked, b: int, lo: int, limit: int
) -> list[tuple[int, int]] | None:
    """The model's walk of silent rounds from the chunked request's known end and the
    baseline ``b``: (start, baseline) before each step whose start is below ``lo``, where
    the walk does not land in [lo, lo + page) (it passes over the window or finishes the
    request first); None where it lands, or needs more than ``limit`` steps."""
    seq, d = chunked.seq_len, chunked.done
    out: list[tuple[int, int]] = []
    while d < lo:
        if len(out) >= limit:
            return None
        out.append((d, b))
        end, _ = chunk_step(cfg, d, seq, b)
        b, d = b - cfg.pages_for(d, end), end
    return None if d < lo + cfg.page_size and d < seq else out


def resumed_end(cfg: Config, start: int, spent: int) -> int | None:
    """The end of a non-last resumed piece from ``start`` whose page-ceiled length is
    ``spent``: aligned down to the checkpoint align unless that would reach the start.
    None when no such piece exists (so it must have started elsewhere)."""
    return sizing.resumed_end_for(start, spent, cfg.page_size, cfg.align_size)


def baselines_for(
    cfg: Config, done: int, seq: int, lo: int, hi: int, above: int
) -> tuple[int, int] | None:
    """The baselines above ``above`` (within the pool) from which the model's resumed piece
    from ``done`` ends in [lo, hi], as (least, most); None when none does
    (``sizing.resumed_baselines_for``)."""
    return sizing.resumed_baselines_for(
        done, seq, cfg.chunked_prefill_size, cfg.align_size, (lo, hi), above, cfg.pool_size
    )
