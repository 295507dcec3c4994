"""Logs -> rebuilt rounds in one pass, in batches: memory does not grow with the log
(``rounds -o``).

Event frames come from the reader a chunk at a time. Until the first adder line the
frames are held (the startup lines before it give the configuration and the deciding
rank); from then on the deciding rank's rebuild events go row by row into a
``Rebuilder`` and its rounds are handed on at once. Every other event (startup lines,
other ranks' batch lines and plans) is kept, without its empty columns, for the
cross-checks at the end.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import polars as pl
from mypy_extensions import mypyc_attr

from kvforensics.errors import InputError
from kvforensics.logs.catalogue import load_catalogue
from kvforensics.logs.reader import iter_events
from kvforensics.logs.summary import ParseSummary
from kvforensics.model import Config
from kvforensics.rounds.config import check_overrides, read_config
from kvforensics.rounds.crosscheck import Span, merge_spans, spans_of
from kvforensics.rounds.provenance import Prov
from kvforensics.rounds.ranks import deciding_rank
from kvforensics.rounds.rebuild import Rebuild, Rebuilder, other_batches
from kvforensics.rounds.records import Round
from kvforensics.rounds.segment import KINDS, rows_of
from kvforensics.rounds.source import check_prefill, has_adder_lines, require_adder_lines


# compiled, a plain class: copy and pickle cannot set a native frozen dataclass's fields
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class Narrow:
    """``--since`` / ``--until``: a round number or a time (inclusive). Rounds outside are
    still rebuilt (later rounds depend on them) but handed to nobody."""

    since_round: int | None = None
    until_round: int | None = None
    since_time: datetime | None = None
    until_time: datetime | None = None

    @classmethod
    def parse(cls, since: str | None, until: str | None) -> Narrow:
        (sr, st), (ur, ut) = _bound(since, "--since"), _bound(until, "--until")
        return cls(sr, ur, st, ut)

    def before(self, rnd: Round) -> bool:
        if self.since_round is not None and rnd.index < self.since_round:
            return True
        return self.since_time is not None and rnd.time is not None and rnd.time < self.since_time

    def within(self, rnd: Round) -> bool:
        return not (self.before(rnd) or self.after(rnd))

    def after(self, rnd: Round) -> bool:
        if self.until_round is not None and rnd.index > self.until_round:
            return True
        return self.until_time is not None and rnd.time is not None and rnd.time > self.until_time

    def trim(self, rb: Rebuild) -> None:
        """What falls outside is no part of the replay: the logged out-of-memory and the
        contradictions of rounds there (the cross-checks ran on the rounds kept)."""
        if not self:
            return
        o = rb.oom
        if o is not None and o.round is not None:
            at = Round(o.round, datetime.fromisoformat(o.time) if o.time else None)
            if not self.within(at):
                rb.oom = None
        # a contradiction carries its round's number only: a time bound does not cut it
        rb.contradictions = [
            c for c in rb.contradictions if c.round is None or self.within(Round(c.round, None))
        ]

    def events(self) -> pl.Expr | None:
        """The events within the time bounds, for ``parse``: it gives events, not rounds,
        so a round number means nothing there and is refused. An event without a time is
        kept, as a round without one is: it cannot be placed outside."""
        for flag, n in (("--since", self.since_round), ("--until", self.until_round)):
            if n is not None:
                raise InputError(
                    f"{flag} {n}: parse gives events, not rounds, so a round number has no "
                    "meaning here; give a time like '2026-11-02 15:16:26' (or run "
                    f"`kvforensics rounds LOG... {flag} {n} -o rounds.ndjson` for the rounds)"
                )
        if not self:
            return None
        t = pl.col("time")
        inside = pl.lit(True)
        if self.since_time is not None:
            inside = inside & (t >= self.since_time)
        if self.until_time is not None:
            inside = inside & (t <= self.until_time)
        return t.is_null() | inside

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.since_round, self.until_round,
                                           self.since_time, self.until_time))  # fmt: skip


def _bound(text: str | None, flag: str) -> tuple[int | None, datetime | None]:
    if text is None:
        return None, None
    text = text.strip()
    if text.isdigit():
        return int(text), None
    try:
        return None, datetime.fromisoformat(text)
    except ValueError:
        raise InputError(
            f"{flag} {text!r}: give a round number or a time like '2026-11-02 15:16:26'"
        ) from None


@dataclass
class LogStream:
    """Iterate for the rounds; afterwards ``summary``, ``side`` and ``rebuilder`` hold what
    the pass learned. ``cfg``/``config``/``rank`` are set once the first adder line is read."""

    paths: list[Path]
    overrides: dict[str, int | None] = field(default_factory=dict)
    rank: str | None = None
    formats: list[Path] | None = None
    progress: bool = False
    #: refuse logs without adder lines (replay), before asking for their configuration
    need_adder: bool = False
    #: logs without adder lines: keep their events in ``unreplayable`` and give no round
    #: (for the caller to say what they can tell) instead of checking them further
    hold: bool = False
    unreplayable: pl.DataFrame | None = None
    #: each rank's time span, gathered as the frames pass
    spans: dict[str, Span] = field(default_factory=dict)
    summary: ParseSummary = field(default_factory=ParseSummary)
    cfg: Config | None = None
    config: dict[str, Prov] = field(default_factory=dict)
    rebuilder: Rebuilder | None = None
    #: whether any line's time carries milliseconds
    has_ms: bool = False
    _side: list[pl.DataFrame] = field(default_factory=list)
    _batches: pl.DataFrame | None = None

    def __iter__(self) -> Iterator[Round]:
        check_overrides(self.overrides)
        self._batches = self._batch_lines() if len(self.paths) > 1 else None
        held: list[pl.DataFrame] | None = []
        frames = iter_events(
            self.paths, self.summary, extra_formats=self.formats, progress=self.progress
        )
        for frame in frames:
            if held is None:
                yield from self._frame(frame)
                continue
            held.append(frame)
            if frame.height and (frame["kind"] == "adder_check").any():
                self._start(held)
                for f in held:
                    yield from self._frame(f)
                held = None
        if held is not None:  # no adder line at all: rebuild from what there is
            if self.hold:
                self.unreplayable = _concat(held, self.formats)
                return
            self._start(held)
            for f in held:
                yield from self._frame(f)
        yield from self.rebuilding().finish()
        present = {r for fs in self.summary.files for r in fs.ranks}
        if self.rank and self.rank not in present:
            raise InputError(f"--rank {self.rank}: no line of these logs is tagged {self.rank}")

    def settled_cfg(self) -> Config:
        """The configuration, once the first adder line (or the end of a log without one)
        read it."""
        assert self.cfg is not None
        return self.cfg

    def deciding(self) -> str:
        """The deciding rank, once the first read told it."""
        assert self.rank is not None
        return self.rank

    def rebuilding(self) -> Rebuilder:
        """The rebuild, once the first adder line (or the end of a log without one) started it."""
        assert self.rebuilder is not None
        return self.rebuilder

    def settled_config(self) -> tuple[dict[str, Prov], str | None]:
        """The configuration's evidence as the whole log gives it (the last restart's
        startup lines, which may come after the first adder line or in another rank's
        file), and a note when those give other sizes than the rounds were rebuilt with."""
        side = self.side
        if not side.height:
            return self.config, None
        try:
            cfg, conf = read_config(side, self.overrides, self.summary.unreadable_samples)
        except InputError:
            return self.config, None
        if cfg == self.cfg:
            return conf, None
        changed = [
            f"{n} {conf[n].value} ({'; '.join(conf[n].evidence)})"
            for n in conf
            if n in self.config and conf[n].value != self.config[n].value
        ]
        return self.config, (
            "later startup lines give other sizes: "
            + ", ".join(changed)
            + "; the rounds were rebuilt with those before the first adder line"
        )

    @property
    def side(self) -> pl.DataFrame:
        """Every event that is not one of the deciding rank's rebuild events."""
        return pl.concat(self._side, how="diagonal_relaxed") if self._side else pl.DataFrame()

    def _start(self, held: list[pl.DataFrame]) -> None:
        first = pl.concat(held, how="vertical") if held else pl.DataFrame()
        adder = has_adder_lines(first)
        check_prefill(adder, self.summary)
        if self.need_adder:
            require_adder_lines(adder)
        if first.height == 0:
            raise InputError("no events in these logs: " + "; ".join(self.summary.gaps or ["none"]))
        # A rank asked for may first appear in a later file: checked when the pass ends.
        self.rank = self.rank if self.rank is not None else deciding_rank(first, None)
        cfg, conf = read_config(first, self.overrides, self.summary.unreadable_samples)
        self.cfg, self.config = cfg, conf
        lines = first if self._batches is None else self._batches
        self.rebuilder = Rebuilder(cfg, other_batches(lines, self.rank))
        self._batches = None  # the index has what the rebuild needs of them

    def _batch_lines(self) -> pl.DataFrame:
        """Every batch line of the logs, read ahead: a silent round's piece may need
        another rank's, and that rank's file may come after the deciding rank's. (With
        one file, the batch lines before the first adder line are all it gets.)"""
        keep = []
        ahead = iter_events(self.paths, ParseSummary(), extra_formats=self.formats,
                            label="reading batch lines")  # fmt: skip
        for frame in ahead:
            # the sizes ``BatchSizes.of`` reads: batch lines and the fork's PP plan lines
            sizes = [c for c in ("new_token", "extend_tokens") if c in frame.columns]
            if sizes:
                b = frame.filter(pl.col("kind").is_in(["prefill_batch", "replay_plan"]))
                keep.append(b.select("kind", "rank", "file", "line", "time", *sizes))
        return pl.concat(keep, how="diagonal_relaxed") if keep else pl.DataFrame()

    def _frame(self, frame: pl.DataFrame) -> Iterator[Round]:
        self.spans = merge_spans(self.spans, spans_of(frame))
        if not self.has_ms and "time_has_ms" in frame.columns:
            self.has_ms = bool(frame["time_has_ms"].any())
        mine = pl.col("kind").is_in(KINDS) & (pl.col("rank") == self.rank)
        rows = frame.filter(mine)
        other = frame.filter(~mine)
        if other.height:
            # Other ranks' rebuild events are not needed again; startup and batch lines are.
            other = other.filter(~pl.col("kind").is_in(KINDS))
            keep = [c for c in other.columns if other[c].null_count() < other.height]
            self._side.append(other.select(keep))
        feed = self.rebuilding().feed
        for ev in rows_of(rows):
            yield from feed(ev)


def _concat(frames: list[pl.DataFrame], formats: list[Path] | None) -> pl.DataFrame:
    if frames:
        return pl.concat(frames, how="vertical")
    return pl.DataFrame(schema=load_catalogue(formats).schema())


def finished(rnd: Round, seq_lens: dict[str, int]) -> list[str]:
    """The requests whose last piece ``rnd`` ran (none in a round that ran out of memory:
    its pieces were never computed). Each once: a reused request id can put two pieces
    of one rid in a round, and its length is forgotten once."""
    if rnd.oom is not None:
        return []
    # a loop, not a generator: compiled, no generator object a round (a round has a few
    # pieces, so the list's own ``in`` is cheap)
    out: list[str] = []
    for p in rnd.pieces:
        if p.end == seq_lens.get(p.rid) and p.rid not in out:
            out.append(p.rid)
    return out


def forgetting(ls: LogStream, rounds: Iterable[Round]) -> Iterator[Round]:
    """``rounds`` (of ``ls``), each finished request's prompt length dropped once its round
    is handed on: the rebuild needs no finished request's, so memory stays flat in the
    log's length (a replay's pass drops them itself)."""
    for rnd in rounds:
        yield rnd
        lens = ls.rebuilding().seq_lens
        for rid in finished(rnd, lens):
            del lens[rid]


def narrow_rounds(rounds: Iterable[Round], narrow: Narrow) -> Iterator[Round]:
    """The stream's rounds within ``--since``/``--until``; reading stops after ``--until``."""
    for rnd in rounds:
        if narrow.after(rnd):
            break
        if not narrow.before(rnd):
            yield rnd
