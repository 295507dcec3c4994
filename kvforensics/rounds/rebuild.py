"""Raw rounds of the deciding rank -> scheduling rounds, each value with its provenance.

Rounds that printed no adder line (a chunked request resuming alone) are inferred by
running the chunked request forward through the model's ``add_chunked_req`` sizing
(``model/sizing.py``), then checked against every other piece of evidence. The
``Rebuilder`` places raw rounds one at a time, in log order. A round with an observed
baseline is handed on at once; the silent rounds after it wait for the next one (or the
end of the log), because the out-of-memory line may still move their baselines: that
short tail is all the lookahead there is.
"""

from __future__ import annotations

import sys
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from kvforensics.model import Config
from kvforensics.rounds.batch_index import BatchSizes
from kvforensics.rounds.config import ALIGN_SIZE
from kvforensics.rounds.drop import Drop
from kvforensics.rounds.oom_place import OomPlacement
from kvforensics.rounds.provenance import DERIVED, INFERRED, OBSERVED, Prov
from kvforensics.rounds.ranks import deciding_rank
from kvforensics.rounds.reconcile import Shrinks, impossible_baselines, shrink_drops
from kvforensics.rounds.records import Contradiction, Decision, LoggedOom, Piece, Round
from kvforensics.rounds.rows import Row
from kvforensics.rounds.segment import KINDS, Segmenter, rows_of
from kvforensics.rounds.walk import (
    MAX_ROUNDS_PER_SECOND,
    Chunked,
    Pending,
    baseline_value,
    baselines_for,
    chunk_step,
    first_lock,
    first_start,
    lock_released,
    resumed_end,
    risen,
    risen_round,
    silent_round,
    walk_below,
)

__all__ = [
    "KINDS", "Chunked", "Decision", "Pending", "Piece", "Rebuild", "Rebuilder", "Round",
    "rebuild_rounds",
]  # fmt: skip


@dataclass
class Rebuild:
    cfg: Config
    config: dict[str, Prov]
    rounds: list[Round]
    oom: LoggedOom | None
    contradictions: list[Contradiction]
    block_size: int | None
    rank: str
    seq_lens: dict[str, int]

    #: the request still chunked when the deciding rank's log ends, with the baseline
    #: its last round left (its later rounds may be silent)
    pending: Pending | None = None
    #: falls of the baseline that only silent rounds' evidence shows (``continuity.Drop``)
    drops: list[Drop] = field(default_factory=list)

    @property
    def align_prov(self) -> Prov | None:
        """Where the checkpoint alignment came from (its line, or the flag)."""
        return self.config.get(ALIGN_SIZE)

    def round_at(self, index: int) -> Round | None:
        """The round with this index, if it is held (a streamed replay keeps only some)."""
        i = bisect_left(self.rounds, index, key=lambda r: r.index)
        return self.rounds[i] if i < len(self.rounds) and self.rounds[i].index == index else None

    def extend_silent(self, rounds: int, evidence: str) -> int:
        """Add up to ``rounds`` silent rounds of the pending chunked request (another rank
        shows rounds after the deciding rank's last line). Returns how many were added."""
        added = 0
        while self.pending and added < rounds:
            chunked, base_end = self.pending.chunked, self.pending.base_end
            index = self.rounds[-1].index + 1 if self.rounds else 0
            r, after, base_end, _ = silent_round(
                self.cfg, chunked, base_end, index, None, self.block_size
            )
            r.pieces[0].evidence.append(evidence)
            self.rounds.append(r)
            self.pending = Pending(after, base_end) if after else None
            added += 1
        return added

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": {k: v.as_dict() for k, v in self.config.items()},
            "rank": self.rank,
            "rounds": [r.as_dict() for r in self.rounds],
            "oom": self.oom.as_dict() if self.oom else None,
            "contradictions": [c.as_dict() for c in self.contradictions],
        }


class Rebuilder(OomPlacement):
    """Raw rounds in, rebuilt rounds out, one at a time; each round's index is given once,
    when it is handed on. ``seq_lens`` (rid -> prompt length) is what later stages need of
    the requests; everything else about a round leaves with it."""

    def __init__(self, cfg: Config, batch_sizes: BatchSizes | None = None) -> None:
        self.cfg = cfg
        #: other ranks' batch lines by time: what a silent round's piece was when its
        #: AttentionStore write leaves the end open
        self.batch_sizes = batch_sizes if batch_sizes is not None else BatchSizes()
        self.segmenter = Segmenter(cfg)
        self.block: int | None = None  # the AttentionStore block size, once a write is seen
        self.contradictions: list[Contradiction] = []
        self.seq_lens: dict[str, int] = {}
        #: each prompt length set, in order, where a caller asks (a list, not None): the
        #: byte-range join sets them again in the same order (``replay/ranges.py``)
        self.noted: list[tuple[str, int]] | None = None
        self.oom: LoggedOom | None = None  # the last out-of-memory line, once placed
        self._placed: LoggedOom | None = None  # the last one placed so far
        self.chunked: Chunked | None = None
        self.base_end: Prov | None = None
        self.count = 0  # rounds handed on so far: the next round's index
        #: rounds handed on that logged adder lines / had pieces / were forwarded
        self.logged = self.with_pieces = self.forwarded = 0
        self._out: list[Round] = []  # handed on by the current ``place``
        #: the silent rounds since the last round with an observed baseline (held back:
        #: an out-of-memory line may still move their baselines)
        self._held: list[Round] = []
        self._last: Round | None = None  # the last round placed
        #: silent rounds whose AS write ends before the model's sizing: round -> (model,
        #: lo, hi), of the held rounds (a later observed baseline measures the fall)
        self.shrinks: Shrinks = {}
        self.drops: list[Drop] = []
        self._late: list[Contradiction] = []  # impossible baselines: told after the rest
        #: silent rounds inferred since the last round that printed a line, and that
        #: round's time: what ``MAX_ROUNDS_PER_SECOND`` bounds
        self._silent = 0
        self._printed_at: datetime | None = None

    # -- what the stream sees -------------------------------------------------
    def stream(self, rows: Iterable[Row]) -> Iterator[Round]:
        """Rebuilt rounds as the deciding rank's events come (in line order)."""
        for ev in rows:
            yield from self.feed(ev)
        yield from self.finish()

    def feed(self, ev: Row) -> list[Round]:
        """One event; the rounds it completed (usually none, at most a few)."""
        raw = self.segmenter.feed(ev)
        if self.block is None and self.segmenter.first_write is not None:
            self.block = self.segmenter.first_write.block_size
        return self.place(raw) if raw is not None else []

    def finish(self) -> list[Round]:
        """The log has ended: its last round, and the silent rounds held back."""
        raw = self.segmenter.finish()
        out = self.place(raw) if raw is not None else []
        oom = self.segmenter.oom
        if oom is not None and self._placed is None:
            self._placed = oom.placed(self._last.index if self._last else None)
        self.oom = self._placed if oom is not None else None
        held = {r.index: r for r in self._held}
        self.drops.extend(shrink_drops(self.cfg, held, self.shrinks))
        out += self._flush()
        self.contradictions.extend(self._late)
        self._late = []
        return out

    def config(self) -> dict[str, Prov]:
        """What the events said about the configuration (the AttentionStore block size)."""
        w = self.segmenter.first_write
        return {"as_block_size": Prov(self.block, OBSERVED, [w.where])} if w else {}

    def collected(self, rounds: list[Round], config: dict[str, Prov], rank: str) -> Rebuild:
        """``rounds`` (all this rebuilder gave) as one ``Rebuild``."""
        out = Rebuild(
            self.cfg, config, rounds, self.oom, self.contradictions, self.block, rank,
            self.seq_lens, drops=self.drops,
        )  # fmt: skip
        out.pending = self.pending()
        return out

    def place(self, rnd: Round) -> list[Round]:
        """Place one raw round: the silent rounds its evidence puts before it, then it."""
        if rnd.decisions:
            self._logged(rnd)
        elif rnd.as_writes and not rnd.oom:
            self._forward(rnd)
        if rnd.oom is not None:
            self._placed = self._oom(rnd)
        out, self._out = self._out, []
        return out

    def pending(self) -> Pending | None:
        """The chunked request left when the log ends (no out of memory), for other ranks'
        lines to extend."""
        return Pending(self.chunked, self.base_end) if self.chunked and self.oom is None else None

    def _emit(self, rnd: Round) -> None:
        rnd.index = self.count
        self.count += 1
        if rnd.decisions or rnd.as_writes or rnd.oom is not None:
            self._silent, self._printed_at = 0, rnd.time
        else:
            self._silent += 1
        self.logged += bool(rnd.decisions)
        if rnd.pieces:
            self.with_pieces += 1
            self.forwarded += rnd.oom is None
            if rnd.oom is None:
                shown = all(p.provenance in (OBSERVED, DERIVED) for p in rnd.pieces)
                tokens = sum(p.end - p.start for p in rnd.pieces)
                self.batch_sizes.ran(rnd.time, tokens, shown=shown)
        self._last = rnd
        if rnd.baseline is not None and rnd.baseline.provenance == OBSERVED:
            # What came before is settled: a later fall is measured from this baseline.
            self.shrinks.clear()
            self._out += self._flush()
            self._out += self._checked([rnd])
        else:
            self._held.append(rnd)

    def _flush(self) -> list[Round]:
        held, self._held = self._held, []
        return self._checked(held)

    def _checked(self, rounds: list[Round]) -> list[Round]:
        impossible_baselines(self.cfg, rounds, self._late)
        return rounds

    def _contradiction(self, what: str, detail: str) -> None:
        self.contradictions.append(Contradiction(self.count, what, detail))

    def _now(self) -> Chunked | None:
        """The chunked request as it is now. NOTE: read through a call after a call that
        may move it on or end it: a narrowed ``self.chunked`` would be taken for the one
        read before the call (mypy keeps the narrowing; the compiled build relies on it)."""
        return self.chunked

    def _base(self) -> int:
        return baseline_value(self.base_end)

    def _allowance(self, time: datetime | None) -> int:
        """How many more silent rounds fit before a round printed at ``time``: the time
        since the last printed round (plus the timestamps' 1 s) at ``MAX_ROUNDS_PER_SECOND``.
        Without both times only the request's length bounds them (``sys.maxsize`` here)."""
        if time is None or self._printed_at is None:
            return sys.maxsize
        span = max((time - self._printed_at).total_seconds(), 0.0) + 1.0
        return max(int(span * MAX_ROUNDS_PER_SECOND) - self._silent, 0)

    def _gap(
        self, until: int, time: datetime | None, *, stop: Callable[[int], bool] | None = None
    ) -> None:
        """Silent rounds of the chunked request between its known end and ``until`` (or
        until ``stop(done)`` says the next known piece starts here). Each advances the
        request by at least one token, so ``until - done`` bounds them; the log's time span
        bounds them too, and so does the pool (a chunked request holds all it has computed
        on the device): a gap that needs more is a contradiction, and stops there."""
        left = self._allowance(time)
        while self.chunked and self.chunked.done < until and not (stop and stop(self.chunked.done)):
            if left <= 0:
                self._walk_past_evidence(time, None)
                return
            left -= 1
            told = self._told_round(time, until)
            if told is not None:
                self._emit(told)
                continue
            r, chunked, base_end, over = silent_round(
                self.cfg, self.chunked, self.base_end, self.count, time, self.block, until
            )
            if r.pieces[0].end > self.cfg.pool_size:
                self._walk_past_evidence(time, r.pieces[0].end)
                return
            self.chunked, self.base_end = chunked, base_end
            if over is not None:
                # Shorter than the assumed baseline allows: memory went somewhere unseen.
                self.shrinks[self.count] = (over, until, until)
            self._emit(r)

    def _told_round(self, time: datetime | None, until: int) -> Round | None:
        """The next silent round as another rank's seated batch line prints it: the
        chunked request resumed alone, so ``#new-token`` is its piece. Where that is not
        the piece the assumed baseline gives, memory went or came back unseen, as in
        ``_forward``. None where no line is seated, or its size is no piece the model's
        sizing gives from here (or passes ``until``): the plain walk then decides."""
        cfg, c = self.cfg, self.chunked
        assert c is not None  # ``_gap`` walks the chunked request
        told = self.batch_sizes.size(time, 1, c.seq_len - c.done, near=False)
        if told is None or c.done + told[0] > until:
            return None
        size, where = told
        end, b = c.done + size, self._base()
        model_end, forced = chunk_step(cfg, c.done, c.seq_len, b)
        gives = baselines_for(cfg, c.done, c.seq_len, end, end, 0)
        if end != model_end and gives is None and end != chunk_step(cfg, c.done, c.seq_len, 0)[0]:
            return None
        evid = [
            f"{where}: #new-token {size}, the chunked request alone in a round that printed "
            "no adder line",
            f"baseline {b} assumed unchanged since the last known round (no KV transfer ended)",
        ]
        rose: Prov | None = None
        if model_end > end and not forced:
            # Shorter than the baseline allows: memory went somewhere unseen.
            self.shrinks[self.count] = (model_end, end, end)
        elif end != model_end:
            rose = self._rise(c.done, c.seq_len, (end, end, end), b, model_end)
        r = Round(self.count, time)
        r.pieces.append(Piece(c.rid, c.done, end, "resumed", INFERRED, evid))
        b = baseline_value(rose) if rose is not None else b
        pages = cfg.pages_for(c.done, end)
        r.baseline = rose or Prov(b, INFERRED, evid[1:])
        self.base_end = r.baseline_end = Prov(b - pages, INFERRED, [f"{b} - {pages} allocated"])
        self.chunked = Chunked(c.rid, c.seq_len, end) if end < c.seq_len else None
        return r

    def _walk_past_evidence(self, time: datetime | None, end: int | None) -> None:
        """The walk needs more than the evidence allows: the time span, or (``end``, where
        the next piece would end) the pool."""
        assert self.chunked is not None  # only a walk of the chunked request gets here
        rid, seq, done = self.chunked.rid, self.chunked.seq_len, self.chunked.done
        self._contradiction("silent rounds", (
            f"{rid} (seq_len {seq}) at {done} needs more silent rounds before {time} than "
            f"the log's time span allows ({self._silent} since {self._printed_at}, at most "
            f"{MAX_ROUNDS_PER_SECOND} a second)"
        ) if end is None else (
            f"{rid} (seq_len {seq}) at {done}: its next silent piece would end at {end}, "
            f"past the pool of {self.cfg.pool_size} that holds all of it"
        ))  # fmt: skip
        # where it stands is unknown from here: no later walk starts from a guess
        self.chunked = None

    # -- a round with adder lines ---------------------------------------------
    def _logged(self, rnd: Round) -> None:
        cfg, first = self.cfg, rnd.decisions[0]
        if self.chunked and first.rem_chunk_tokens == cfg.chunked_prefill_size:
            # The full budget is left: the chunked request finished in rounds that printed
            # nothing (alone in the batch, its waiting queue skipped).
            self._gap(self.chunked.seq_len, rnd.time)
        if self.chunked:
            self._resumed(rnd, first)
        for d in rnd.decisions:
            self.seq_lens[d.rid] = d.seq_len
            if self.noted is not None:
                self.noted.append((d.rid, d.seq_len))
            if d.decision in ("full", "truncated") and d.start is not None and d.end is not None:
                rnd.pieces.append(Piece(d.rid, d.start, d.end, "new", OBSERVED, [d.where]))
                if d.decision == "truncated":
                    self.chunked = Chunked(d.rid, d.seq_len, d.end)
        rnd.baseline = Prov(first.baseline, OBSERVED, [first.where])
        rnd.first_lock = first_lock(cfg, rnd, self.base_end)
        last = rnd.decisions[-1]
        loaded = last.load_back_slots(cfg)
        alloc = sum(cfg.pages_for(p.start, p.end) for p in rnd.pieces)
        back = lock_released(cfg, rnd.decisions, rnd.first_lock)
        self.base_end = Prov(
            last.baseline + back - loaded - alloc,
            DERIVED,
            [f"{last.baseline} ({last.where})"
             + (f" + {back} its refused request's prefix lock gave back" if back else "")
             + f" - load-back {loaded} - {alloc} allocated"],
        )  # fmt: skip
        rnd.baseline_end = self.base_end
        self._emit(rnd)

    def _resumed(self, rnd: Round, first: Decision) -> None:
        """The chunked request's piece before the first check, from the chunk budget it
        spent; silent rounds before it where its size says it started later."""
        cfg, c = self.cfg, self.chunked
        assert c is not None  # a resumed piece needs a chunked request
        rid, seq, done = c.rid, c.seq_len, c.done
        spent = cfg.chunked_prefill_size - first.rem_chunk_tokens
        # The two offsets at the first check tell whether the resumed piece was the last
        # one: only a last piece also promises its first token to later rounds.
        promised = first.cur_rem_tokens - first.rem_total_tokens
        if promised == cfg.max_new_tokens and cfg.ceil_page(seq - done) != spent:
            # Silent rounds came first; the last piece is the one whose page-ceiled
            # length the chunk budget shows.
            if not self._rise_to_last(seq - spent, rnd.time):
                self._gap(seq, rnd.time, stop=lambda d: cfg.ceil_page(seq - d) <= spent)
        elif promised != cfg.max_new_tokens:
            # A non-last piece of this size: where the model's own sizing first gives one
            # is where it starts; the rounds before it printed nothing.
            start = first_start(cfg, c, self.base_end, spent, self._allowance(rnd.time))
            if start is not None:
                self._gap(seq, rnd.time, stop=lambda d: d >= start)
            elif resumed_end(cfg, done, spent) is None:
                self._gap(seq, rnd.time, stop=lambda d: resumed_end(cfg, d, spent) is not None)
        now = self._now()  # the walk moved it on, or finished it
        if now:
            rid, seq, done = now.rid, now.seq_len, now.done
        if cfg.ceil_page(seq - done) == spent:
            end = seq
        else:
            end = resumed_end(cfg, done, spent) or chunk_step(cfg, done, seq, spent)[0]
        if cfg.ceil_page(end - done) != spent:
            self._contradiction(
                "resumed piece",
                f"rem_chunk_tokens {first.rem_chunk_tokens} at {first.where} does not follow "
                f"from resuming {rid} at {done}",
            )
        rnd.pieces.append(
            Piece(
                rid,
                done,
                end,
                "resumed",
                DERIVED,
                [
                    f"chunk budget spent before the first check: {cfg.chunked_prefill_size} - "
                    f"{first.rem_chunk_tokens} = {spent} ({first.where})"
                ],
            )
        )
        self.chunked = Chunked(rid, seq, end) if end < seq else None

    def _rise_to_last(self, lo: int, time: datetime | None) -> bool:
        """Silent rounds before a resumed last piece that starts in [lo, lo + page): where
        the model's walk from the assumed baseline cannot start one there (its steps pass
        over that window, or take the forced branch with no out-of-memory logged), memory
        came back during the walk, and one round rose to end in the window. Which round
        rose: the one whose size another rank's batch line prints, else the walk's last
        before it would pass the window (the baseline assumed unchanged as long as the
        evidence lets it). Returns False, adding nothing, where the walk lands or no rise
        ends there (the plain walk then says what it can)."""
        cfg, c = self.cfg, self.chunked
        assert c is not None  # ``_resumed`` checks
        seq, hi = c.seq_len, lo + cfg.page_size - 1
        steps = walk_below(cfg, c, self._base(), lo, self._allowance(time))
        if steps is None:
            return False  # the walk lands in the window, or is out of evidence
        rises = [(k, d, b, got) for k, (d, b) in enumerate(steps)
                 if (got := baselines_for(cfg, d, seq, lo, min(hi, seq - 1), b)) is not None]
        if not rises:
            return False
        told = [(d, b, n) for k, d, b, _ in rises
                if (n := self._batch_size(time, lo - d, min(hi, seq - 1) - d, k)) is not None]
        if told:
            d, b, (size, where) = told[0]
            got = baselines_for(cfg, d, seq, d + size, d + size, b)
            if got is None:
                return False
            end, evid = d + size, f"{where}: #new-token {size} puts the end at {d + size}; "
        else:
            # a paged pool's baseline is whole pages: the least such one in the range
            _, d, b, got = rises[-1]
            paged = cfg.ceil_page(got[0])
            end, evid = chunk_step(cfg, d, seq, paged if paged <= got[1] else got[0])[0], ""
        self._gap(d, time)
        now = self._now()
        assert now is not None and now.done == d, "the walk reproduces"
        rose = risen(baselines_for(cfg, d, seq, end, end, b) or got, now.rid, end,
                     f"its last piece starts in [{lo}, {hi}] (the chunk budget at the next "
                     f"check); the baseline {b} the walk assumed does not start it there",
                     evid)  # fmt: skip
        r, self.chunked, self.base_end, _ = risen_round(cfg, now, rose, self.count, time, end)
        self._emit(r)
        return True

    # -- a forward with no adder line -----------------------------------------
    def _forward(self, rnd: Round) -> None:
        """AttentionStore writes and no adder line: the chunked request resumed alone."""
        cfg, block = self.cfg, self.block
        rid_w = [r for r, _, _ in rnd.as_writes]
        c = self.chunked
        if not c or c.rid not in rid_w:
            self._contradiction(
                "AttentionStore write",
                f"writes for {rid_w} ({rnd.as_writes[0][2]}) in a round without adder "
                "lines, but no chunked request is known",
            )
            return
        assert block is not None  # set by the round's first write
        rid, seq, done = c.rid, c.seq_len, c.done
        blocks, w = next((b, x) for r, b, x in rnd.as_writes if r == rid)
        lo, hi = blocks * block, min(seq, blocks * block + block - 1)
        if lo > seq:
            # A block past the request's end: another request under the same rid (a
            # reused request id, or two ranks' files in one), not a piece of this one.
            self._contradiction(
                "AttentionStore write",
                f"{w} writes block {blocks} of {rid}, past its seq_len {seq} "
                f"(blocks of {block}): no piece of the chunked request ends there",
            )
            return
        self._in_block(lo, rnd.time)
        now = self._now()  # silent rounds inside one block moved it on
        if now:
            rid, seq, done = now.rid, now.seq_len, now.done
        b = self._base()
        end, forced = chunk_step(cfg, done, seq, b)
        evid = [
            f"AttentionStore write blocks={blocks} ({w}): end in [{lo}, {hi}]",
            f"min(chunk {cfg.chunked_prefill_size}, rem_total {b}) with end aligned down to "
            f"{cfg.align_size}",
            f"baseline {b} assumed unchanged since the last known round (no KV transfer ended)",
        ]
        rose: Prov | None = None
        # The write leaves the end open inside its block; a seated batch line does not.
        seated = self.batch_sizes.size(rnd.time, lo - done, hi - done, near=False)
        if not lo <= end <= hi or (seated is not None and done + seated[0] != end):
            model_end = end
            end = lo if lo > done else hi
            told = seated or self._batch_size(rnd.time, lo - done, hi - done)
            if told is not None:
                end = done + told[0]
                evid.insert(1, f"{told[1]}: #new-token {told[0]} puts the end at {end}")
            if model_end > end and not forced:
                # Shorter than the baseline allows: memory went somewhere unseen. (A
                # forced piece is the whole chunk budget whatever is left: a shorter one
                # means memory came back, below.)
                self.shrinks[self.count] = (model_end, end, end) if told else (model_end, lo, hi)
            else:
                rose = self._rise(done, seq, (end, lo, hi), b, model_end)
        elif cfg.pages_for(done, end) > b:
            # The piece the write shows did not fit the assumed baseline (the forced
            # branch), yet no out-of-memory: memory came back before this round.
            rose = self._rise(done, seq, (end, lo, hi), b, end)
        rnd.pieces.append(Piece(rid, done, end, "resumed", INFERRED, evid, interval_end=(lo, hi)))
        pages = cfg.pages_for(done, end)
        if rose is not None:
            b = baseline_value(rose)
        rnd.baseline = rose or Prov(b, INFERRED, evid[2:])
        self.base_end = Prov(b - pages, INFERRED, [f"{b} - {pages} allocated"])
        rnd.baseline_end = self.base_end
        self.chunked = Chunked(rid, seq, end) if end < seq else None
        self._emit(rnd)

    def _in_block(self, lo: int, time: datetime | None) -> None:
        """Pieces of the chunked request that stayed inside one block wrote nothing: silent
        rounds before a write that starts at ``lo``, as the model sizes them from the
        assumed baseline. Adds none when that walk ends in a piece the baseline cannot
        hold with no out-of-memory logged (memory came back, and the write's round is
        next), unless another rank's batch line shows the walk's first step ran.
        The walk stays in one block and below ``lo`` <= seq_len (``_forward`` checks), and
        each step advances a token at least: at most ``min(block, lo - done)`` steps."""
        cfg, block = self.cfg, self.block
        assert self.chunked is not None and block is not None  # ``_forward`` checks
        seq, d = self.chunked.seq_len, self.chunked.done
        b, steps = self._base(), []
        while d < min(lo, seq):
            end, _ = chunk_step(cfg, d, seq, b)
            if end >= lo or end // block != d // block:
                break
            steps.append(end)
            b, d = b - cfg.pages_for(d, end), end
        if not steps:
            return
        if cfg.pages_for(d, chunk_step(cfg, d, seq, b)[0]) > b:
            # Memory came back: before these steps, or after them. Another rank's batch
            # line of the first step's size says they ran first.
            first = steps[0] - self.chunked.done
            if self._batch_size(time, first, first) is None:
                return
        for end in steps:
            self._gap(end, time)

    def _rise(
        self, done: int, seq: int, ends: tuple[int, int, int], b: int, model_end: int
    ) -> Prov | None:
        """A piece longer than the assumed baseline allows: memory came back since the last
        known round (a KV transfer ended, its slots now evictable cache). The baseline is
        then the least the piece needs, bounded by what would have made it longer; a
        contradiction only when no baseline in the pool gives the piece."""
        end, lo, hi = ends
        assert self.chunked is not None  # ``_forward`` checks
        rid = self.chunked.rid
        got = baselines_for(self.cfg, done, seq, end, end, b) or baselines_for(
            self.cfg, done, seq, lo, hi, b
        )
        if got is None:
            self._contradiction(
                "silent round",
                f"model gives end {model_end} for {rid}, AS write says [{lo}, {hi}], and no "
                f"baseline within the pool gives such a piece",
            )
            return None
        return risen(got, rid, end, f"the baseline {b} the last known round left gives {model_end}")

    def _batch_size(
        self, time: datetime | None, least: int, most: int, ahead: int = 0
    ) -> tuple[int, str] | None:
        """The piece size in [least, most] that other ranks' batch lines print for the
        round ``ahead`` rounds past the next, with where; None when they print none, or
        disagree (``BatchSizes.size``)."""
        return self.batch_sizes.size(time, least, most, ahead)


def deciding_rows(frame: pl.DataFrame, rank: str) -> Iterator[Row]:
    """The rebuild's events of ``rank`` in one event frame, as rows in line order."""
    ev = frame.filter(pl.col("kind").is_in(KINDS) & (pl.col("rank") == rank))
    return rows_of(ev.sort(["file", "line"]))


def other_batches(events: pl.DataFrame, deciding: str) -> BatchSizes:
    """Other ranks' batch lines (time, ``#new-token``, where), for the silent rounds."""
    return BatchSizes.of(events, deciding)


def rebuild_rounds(
    events: pl.DataFrame, cfg: Config, config: dict[str, Prov], rank: str | None = None
) -> Rebuild:
    """Every round of the deciding rank's events, collected."""
    deciding = deciding_rank(events, rank)
    rb = Rebuilder(cfg, other_batches(events, deciding))
    rounds = list(rb.stream(deciding_rows(events, deciding)))
    return rb.collected(rounds, {**config, **rb.config()}, deciding)
