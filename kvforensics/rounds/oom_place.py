"""Placing the logged out-of-memory: which round it belongs to, where its piece starts,
and the silent rounds before it that its own numbers (the piece, the availability, the
tree dump after it) require. The ``Rebuilder`` (``rebuild.py``) walks the model's sizing
round by round; this is the one place it meets the crash, so it is kept apart from the
walk. The arithmetic it leans on is in ``reconcile.py`` and ``walk.py``.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from datetime import datetime

from kvforensics.model import Config
from kvforensics.rounds.batch_index import BatchSizes
from kvforensics.rounds.drop import Drop
from kvforensics.rounds.provenance import DERIVED, INFERRED, Prov
from kvforensics.rounds.reconcile import (
    Shrinks,
    move_bracketed_end,
    oom_in_logged_round,
    pinned_start,
    reconcile_oom,
    tree_start,
    walk_to_oom,
)
from kvforensics.rounds.records import LoggedOom, Piece, Round
from kvforensics.rounds.walk import Chunked, chunk_step


class OomPlacement:
    """The ``Rebuilder``'s out-of-memory half. It owns no state of its own: it reads and
    moves on the walk's (the chunked request, the baseline, the held rounds), so the
    attributes and walk steps it uses are declared here and defined by the ``Rebuilder``."""

    cfg: Config
    batch_sizes: BatchSizes
    chunked: Chunked | None
    base_end: Prov | None
    count: int
    shrinks: Shrinks
    drops: list[Drop]
    _held: list[Round]
    _last: Round | None

    # the walk's steps, which the ``Rebuilder`` defines (abstract methods: the compiled
    # build takes no declaration under TYPE_CHECKING in a class body)
    @abstractmethod
    def _emit(self, rnd: Round) -> None: ...

    @abstractmethod
    def _contradiction(self, what: str, detail: str) -> None: ...

    @abstractmethod
    def _now(self) -> Chunked | None: ...

    @abstractmethod
    def _base(self) -> int: ...

    @abstractmethod
    def _allowance(self, time: datetime | None) -> int: ...

    @abstractmethod
    def _told_round(self, time: datetime | None, until: int) -> Round | None: ...

    @abstractmethod
    def _gap(
        self, until: int, time: datetime | None, *, stop: Callable[[int], bool] | None = None
    ) -> None: ...

    def _oom(self, rnd: Round) -> LoggedOom:
        """The logged out-of-memory: the chunked request's piece of that size. Returns it
        as placed (in ``rnd`` or in the later round it belongs to)."""
        oom = rnd.oom
        assert oom is not None  # ``place`` calls it for a round with one
        if rnd.decisions or (rnd.as_writes and self._last is rnd):
            if not self._ran_before(rnd):
                # the batch placed with its adder lines could not be allocated
                return oom_in_logged_round(rnd, oom)
            # The batch fitted: the crash is a later round's, of the chunked request alone.
            at = datetime.fromisoformat(oom.time) if oom.time else rnd.time
            rnd.oom, rnd = None, Round(0, at, oom=oom)
        # an out-of-memory without its size says only that it happened
        if not self.chunked or oom.tokens is None:
            self._emit(rnd)
            rnd.oom = placed_at = oom.placed(rnd.index)
            return placed_at
        rid, seq, done = self.chunked.rid, self.chunked.seq_len, self.chunked.done
        tokens = oom.tokens
        start, placed = self._oom_start(oom, rnd.time)
        if not placed:
            self._contradiction(
                "out of memory",
                f"'Try to allocate {tokens} tokens' is no piece the model gives {rid} after "
                f"{done} (seq_len {seq}); placed where the model runs out of memory, at {start}",
            )
        if placed == "pinned" and start > done:
            self._told_before_pinned(start, oom, rnd.time)
            now = self._now()
            if now is not None and now.done < start:
                self._pinned_round(start, oom, rnd.time)
        self._gap(start, rnd.time)
        b = self._base()
        end = min(start + tokens, seq)
        rnd.pieces.append(
            Piece(
                rid,
                start,
                end,
                "resumed",
                DERIVED,
                [
                    f"out of memory 'Try to allocate {tokens} tokens' ({oom.where}): "
                    f"the piece [{start}, {start} + {tokens})"
                    + (", its last" if end == seq else f", not its last (seq_len {seq})")
                    + (f"; the tree dump holds a locked path of {start} tokens"
                       if placed == "tree" else ""),
                    "forced branch: rem_total_tokens <= 0"
                    if b <= 0
                    else f"min(chunk {self.cfg.chunked_prefill_size}, rem_total {b})",
                ],
            )
        )
        rnd.baseline = self.base_end
        self.chunked = None  # the scheduler process exits here
        self._emit(rnd)
        rnd.oom = placed_at = oom.placed(rnd.index, rid)
        if placed:  # a contradicted piece says nothing about the baseline
            reconcile_oom(self.cfg, self._held, seq, self.shrinks, self.drops)
        return placed_at

    def _ran_before(self, rnd: Round) -> bool:
        """Whether the out-of-memory line after ``rnd``'s adder lines belongs to a later
        round: its piece is not ``rnd``'s batch and its availability is exactly what that
        batch left (so the batch was allocated), with the chunked request still to resume
        (a round whose pieces stayed inside one block writes nothing before the crash)."""
        oom, end = rnd.oom, rnd.baseline_end
        if oom is None or oom.tokens is None or oom.available is None or not self.chunked or end is None:
            return False
        return oom.tokens != rnd.new_tokens() and oom.available == end.value

    def _oom_start(self, oom: LoggedOom, time: datetime | None) -> tuple[int, str | None]:
        """Where the out-of-memory piece starts, and what places it ("walk": the model's
        walk from the last known baseline; "moved" or "pinned": the crash's own
        availability; "tree": the tree dump after the message; None: nothing does)."""
        cfg, tokens = self.cfg, oom.tokens
        assert tokens is not None and self.chunked is not None  # ``_oom`` checks
        rid, seq = self.chunked.rid, self.chunked.seq_len
        start, placed = walk_to_oom(cfg, self.chunked, self.base_end, tokens,
                                   self._allowance(time), oom.available)
        treed = tree_start(cfg, self.chunked, self.base_end, oom, self._allowance(time))
        if treed is not None and (treed != start or not placed):
            return treed, "tree"
        if placed or oom.available is None:
            return start, ("walk" if placed else None)
        avail = oom.available
        last = [self._last] if self._last is not None else []
        moved = move_bracketed_end(cfg, last, self.chunked, tokens, avail)
        if moved is not None:
            assert self._last is not None  # the round whose piece moved
            self.chunked, self.base_end = Chunked(rid, seq, moved), self._last.baseline_end
            return moved, "moved"
        pinned = pinned_start(cfg, self.chunked, tokens, avail)
        return (pinned, "pinned") if pinned is not None else (start, None)

    def _told_before_pinned(self, start: int, oom: LoggedOom, time: datetime | None) -> None:
        """Silent rounds before the pinned one that other ranks' seated batch lines print:
        the crash's availability sizes only the last round before it, so where the lines
        show more rounds between, each is the size its line prints. One is taken only
        where the pinned round after it still starts the crash piece at ``start``."""
        cfg = self.cfg
        assert oom.available is not None  # ``_oom`` checks
        while (c := self._now()) is not None and c.done < start:
            told = self.batch_sizes.size(time, 1, start - c.done, near=False)
            if told is None:
                return
            end = c.done + told[0]
            b = oom.available + cfg.pages_for(end, start)
            if end < start and chunk_step(cfg, end, c.seq_len, b)[0] != start:
                return
            r = self._told_round(time, start)
            if r is None:
                return
            self._emit(r)

    def _pinned_round(self, start: int, oom: LoggedOom, time: datetime | None) -> None:
        """The one silent round ``pinned_start`` found before the crash: the chunked
        request from its known end to ``start``, sized from the crash's availability plus
        its own pages. That observation, not the baseline the last known round was assumed
        to leave, decides it (the assumed one was a lower bound: a lock's size, memory
        back from a transfer)."""
        cfg = self.cfg
        assert self.chunked is not None and oom.available is not None  # ``_oom`` checks
        rid, seq, done = self.chunked.rid, self.chunked.seq_len, self.chunked.done
        pages = cfg.pages_for(done, start)
        b = oom.available + pages
        assert chunk_step(cfg, done, seq, b)[0] == start, "the pinned round's own sizing"
        r = Round(self.count, time)
        r.pieces.append(Piece(rid, done, start, "resumed", INFERRED, [
            f"the out-of-memory piece starts at {start} ({oom.where}): one silent round "
            f"before it, min(chunk {cfg.chunked_prefill_size}, rem_total {b})",
        ]))  # fmt: skip
        r.baseline = Prov(b, INFERRED, [
            f"{oom.available} available at the crash ({oom.where}) + {pages} this round "
            "allocated",
        ])  # fmt: skip
        r.baseline_end = self.base_end = Prov(oom.available, INFERRED, [
            f"{b} - {pages} allocated",
        ])  # fmt: skip
        self.chunked = Chunked(rid, seq, start)
        self._emit(r)
