"""The deciding rank's events, in line order -> raw rounds (what each round printed).

The fork prints no round marker, so a round is cut at: a non-CONTINUE adder result (the
adder stops), a ``rem_chunk_tokens`` or baseline that does not follow from the previous
step, a later second, and the AttentionStore writes that follow each forward. A raw round
is complete when the next one starts, so one round of lookahead is all this needs.
"""

from __future__ import annotations

from datetime import datetime

from kvforensics.logs.tree import tree_paths
from kvforensics.model import Config
from kvforensics.model.sizing import ceil_page
from kvforensics.rounds.records import Decision, LoggedOom, Round
from kvforensics.rounds.rows import FIELDS, KINDS, Check, Oom, Row, Write, rows_of

__all__ = ["FIELDS", "KINDS", "Segmenter", "rows_of"]


def _batch_of(rnd: Round, cfg: Config, tokens: int | None) -> bool:
    """Is ``Try to allocate tokens`` this round's batch? Its admitted pieces plus at most
    the resumed chunk's (the chunk budget spent before its first check)."""
    if not rnd.decisions or tokens is None:
        return False
    new = sum(
        d.end - d.start
        for d in rnd.decisions
        if d.decision in ("full", "truncated") and d.start is not None and d.end is not None
    )
    resumed = cfg.chunked_prefill_size - rnd.decisions[0].rem_chunk_tokens
    return new <= tokens <= new + resumed and (tokens == new or resumed > 0)


class Segmenter:
    """Feed events one at a time; each ``feed`` returns the raw round it completed, if any.

    Raw rounds carry no index: the rebuild numbers them as it places them.
    """

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.cur: Round | None = None
        self.last_time: datetime | None = None
        #: the first AttentionStore write: its block size and where it was read
        self.first_write: Write | None = None
        self.oom: LoggedOom | None = None

    def _new(self, time: datetime | None) -> Round | None:
        done, self.cur = self.cur, Round(-1, time)
        return done

    def _current(self) -> Round:
        """The round being read (every event that reaches it has started one)."""
        assert self.cur is not None
        return self.cur

    def finish(self) -> Round | None:
        done, self.cur = self.cur, None
        return done

    def feed(self, ev: Row) -> Round | None:
        if ev.kind == "adder_check":
            return self._check(ev)
        cur = self.cur
        if ev.kind == "adder_result":
            if cur and cur.decisions and cur.decisions[-1].rid == ev.rid:
                d = cur.decisions[-1]
                d.decision, d.result = ev.decision, ev.result
                d.start, d.end = ev.extend_start, ev.extend_end
        elif ev.kind == "hicache_load_back":
            if cur and cur.decisions and cur.decisions[-1].rid == ev.rid:
                cur.decisions[-1].loaded = ev.loaded
        elif ev.kind == "as_write":
            return self._write(ev)
        elif ev.kind == "oom":
            return self._oom(ev)
        return None

    def _boundary(self, ev: Check) -> bool:
        """Whether this check starts a new adder loop."""
        cfg, cur = self.cfg, self.cur
        last = cur.decisions[-1] if cur and cur.decisions else None
        if (
            cur is None
            or cur.forwarded
            or cur.oom is not None
            or last is None
            or last.result not in (None, "CONTINUE")
            or ev.rem_chunk_tokens > last.rem_chunk_tokens
        ):
            return True
        if (
            last.decision in ("full", "truncated")
            and last.start is not None
            and last.end is not None
        ):
            spent = ceil_page(last.end - last.start, cfg.page_size)  # compiled, not cfg's
            if ev.rem_chunk_tokens != last.rem_chunk_tokens - spent:
                return True  # the budget did not carry over: a new adder
        # Within a round the baseline moves only by the previous admission's load-back and
        # by this request's prefix lock.
        drop = last.baseline - last.load_back_slots(cfg) - ev.baseline
        if drop < 0 or drop > max(ev.prefix_len, 0):
            return True
        # One adder loop takes milliseconds: a later second is a later round.
        return (
            ev.time is not None
            and self.last_time is not None
            and (ev.time - self.last_time).total_seconds() >= 1
        )

    def _check(self, ev: Check) -> Round | None:
        done = self._new(ev.time) if self._boundary(ev) else None
        self.last_time = ev.time
        self._current().decisions.append(
            Decision(
                ev.rid,
                ev.seq_len,
                ev.prefix_len,
                ev.host_hit_len,
                ev.rem_chunk_tokens,
                ev.baseline,
                ev.rem_total_tokens,
                ev.cur_rem_tokens,
                ev.where,
                # its result line, when it came right after (``rows``); else set by it
                ev.decision,
                ev.extend_start,
                ev.extend_end,
                ev.result,
            )
        )
        return done

    def _write(self, ev: Write) -> Round | None:
        """One forward's writes share a round; a rid written twice means another round. A
        write whose block count does not match the piece this round logged for the same
        request belongs to a later, silent round of that request."""
        if self.first_write is None:
            self.first_write = ev
        cur = self.cur
        logged_end = next(
            (
                d.end
                for d in (cur.decisions if cur else [])
                if d.rid == ev.rid and d.end is not None
            ),
            None,
        )
        stale = logged_end is not None and ev.blocks != logged_end // ev.block_size
        done = None
        if (
            cur is None
            or cur.oom is not None
            or stale
            or any(r == ev.rid for r, _, _ in cur.as_writes)
        ):
            done = self._new(ev.time)
        cur = self._current()
        cur.as_writes.append((ev.rid, ev.blocks, ev.where))
        cur.forwarded = True
        return done

    def _oom(self, ev: Oom) -> Round | None:
        oom = LoggedOom(
            ev.oom_tokens,
            ev.oom_available,
            ev.oom_available_size,
            ev.oom_evictable_size,
            ev.where,
            ev.time.isoformat(sep=" ") if ev.time else None,
            swa_available=ev.oom_swa_available,
            swa_available_size=ev.oom_swa_available_size,
            swa_evictable_size=ev.oom_swa_evictable_size,
            mamba_available=ev.oom_mamba_available,
            mamba_available_size=ev.oom_mamba_available_size,
            mamba_evictable_size=ev.oom_mamba_evictable_size,
            tree_paths=tree_paths(ev.attached),
        )
        #: the last out-of-memory line (its round and rid are set once it is placed)
        self.oom = oom
        cur = self.cur
        done = None
        if cur is None or cur.forwarded or not _batch_of(cur, self.cfg, oom.tokens):
            done = self._new(ev.time)
        self._current().oom = oom
        return done
