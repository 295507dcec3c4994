"""One log replayed over byte ranges by several workers, with the same result as one pass.

The log is cut at lines that start a round (a PP0 ``add_one_req`` check line after a line
that is not one) into ``n`` ranges. Each worker reads its configuration from the log's head
as one pass would, then rebuilds from a margin before its cut (the warm-up: the chunked
request mid-prefill, the prompt lengths of the requests alive there, the baseline the
next logged line gives), and re-runs (fidelity, whole-log findings) only the rounds it
owns: from the first logged round whose first line lies at or after its cut, to the first
logged round of the next range, which it reads past its end to see settled.

Round numbers are counted from the start of the log, so a worker numbers its rounds from
its own start; the join takes the offset from the first round two neighbours share and
checks that they agree there: the same rounds before it (the last ``AGREE`` of them), the
same round, the same live prompt lengths and the same state of the rebuild. Where they do
not, the range is run again from further back, then from the start of the log (a pass of
its own, numbered as one pass numbers it). Anything this cannot join the same way (an
out-of-memory line before the last range, a text that names a round number, NUL bytes)
raises ``NotRanged`` and the caller makes the one pass instead: never a different answer.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import marshal
import multiprocessing
import os
import pickle
import re
import tempfile
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import polars as pl

from kvforensics.collector import held_off
from kvforensics.errors import InputError
from kvforensics.logs import load_catalogue
from kvforensics.logs.extract import UNMATCHED_SAMPLES, extract_chunk
from kvforensics.logs.forms import Catalogue
from kvforensics.logs.reader import (
    CHUNK_BYTES,
    MAX_CARRY,
    _collect,
    _Cutter,
    sniff,
    split_lines,
)
from kvforensics.logs.source import is_gzip
from kvforensics.logs.summary import FileSummary, ParseSummary
from kvforensics.logs.wrapper import Wrapper, learn
from kvforensics.model import Config
from kvforensics.model.profiles import Profile
from kvforensics.progress import current
from kvforensics.replay.checks import Checks, Known
from kvforensics.replay.passes import WINDOW, Packed, RoundPass
from kvforensics.rounds.continuity import Continuity
from kvforensics.rounds.crosscheck import merge_spans
from kvforensics.rounds.drop import Drop
from kvforensics.rounds.packed import light, pack
from kvforensics.rounds.provenance import Prov
from kvforensics.rounds.rebuild import Chunked, Rebuilder
from kvforensics.rounds.records import (
    Contradiction,
    LoggedOom,
    Round,
)
from kvforensics.rounds.rows import rows_of
from kvforensics.rounds.segment import KINDS
from kvforensics.rounds.stream import LogStream, finished

#: bytes read before a cut to rebuild the state a range inherits, and after the next cut
#: to see its first round settled
MARGIN, LOOKAHEAD = 1 << 20, 256 << 10
#: rounds before a shared round that must agree between neighbours
AGREE = 32
#: the smallest range worth a worker
MIN_PART = 64 << 10
ENGINES = ("local", "ray")
_CHECK = b"PrefillAdder.add_one_req: rid="
_ADDER = b"PrefillAdder.add_one_req"
_ROUND_NUMBER = re.compile(r"\brounds? \d")


class NotRanged(Exception):
    """This log (or this split of it) cannot be joined as one pass: make the one pass."""


@dataclass(frozen=True, slots=True)
class Window:
    """Bytes ``[start, end)`` of the file; ``line``: the 1-based number of its first line."""

    start: int
    end: int
    line: int


@dataclass(frozen=True, slots=True)
class RangeOptions:
    """How every worker reads its range and what it re-runs: the command's overrides,
    rank and format files, the model profile, whether to gather the whole-log findings."""

    overrides: dict[str, int | None]
    rank: str | None
    formats: list[Path] | None
    profile: Profile
    whole: bool
    #: re-run the rounds owned (a replay); False: rebuild only (``rounds -o``)
    rerun: bool = True
    #: the rounds the join keeps at the end of the log (``passes.WINDOW``); None: all
    window: int | None = WINDOW


@dataclass(frozen=True, slots=True)
class Part:
    """One worker's share: ``pre`` rebuilt only (the warm-up), ``own`` read for good,
    ``post`` rebuilt only, up to the next range's first round (None for the last)."""

    path: str
    index: int
    pre: Window
    own: Window
    post: Window | None
    opts: RangeOptions
    #: the directory the worker writes its rounds into (None: they come back in memory)
    spill: str | None = None
    #: rounds a block of them holds (``BLOCK``)
    block: int = 4096


@dataclass
class Boundary:
    """A worker's view where the next range begins: that round's local index, it and the
    ``AGREE`` rounds before it (``as_dict`` without the number), the live prompt lengths
    and the rebuild's state there."""

    index: int
    rounds: list[dict[str, Any]]
    seq_lens: dict[str, int]
    state: tuple[Any, ...]


@dataclass
class PartResult:
    """What a worker sends back; round numbers are its own (the join moves them)."""

    index: int
    #: the rounds owned, packed (``rounds/packed.py``), with the prompt lengths set
    #: before each: written a block at a time as the worker goes (``_Spill``)
    spilled: Spilled | None = None
    head: Boundary | None = None
    tail: Boundary | None = None
    count: int = 0
    summary: ParseSummary = field(default_factory=ParseSummary)
    side: list[pl.DataFrame] = field(default_factory=list)
    spans: dict[Any, Any] = field(default_factory=dict)
    has_ms: bool = False
    #: the configuration as the log's head gives it (``LogStream.cfg``, ``.config``)
    cfg: Config | None = None
    config: dict[str, Prov] = field(default_factory=dict)
    rank: str | None = None
    contradictions: list[Contradiction] = field(default_factory=list)
    late: list[Contradiction] = field(default_factory=list)
    drops: list[Drop] = field(default_factory=list)
    oom: LoggedOom | None = None
    first_write: Any = None
    block: int | None = None
    chunked: Chunked | None = None
    base_end: Any = None
    checked: int = 0
    mismatches: list[Any] = field(default_factory=list)
    gaps: list[Any] = field(default_factory=list)
    #: the margins' rows (``whole_log.Margins``) as the spool's columns, a block at a
    #: time: arrays travel as their bytes, a tuple a row took several times the room
    margins: list[tuple[Any, ...]] = field(default_factory=list)
    rerun: int = 0
    refused: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    nul: int = 0
    #: the out-of-memory lines of the rounds owned (objects: they travel apart), by position
    ooms: dict[int, LoggedOom] = field(default_factory=dict)


#: rounds a block of a worker's spill holds
BLOCK = 4096
_MARSHAL, _PICKLE = b"m", b"p"


@dataclass
class Spilled:
    """A worker's owned rounds, packed, in blocks (``BLOCK`` rounds each): in the file ``path`` (a
    local pool: the rounds never sit in either process's memory all at once) or in
    ``frames`` (a Ray task, whose result is all that comes back). ``whole``: the positions
    sent with their evidence (the join may keep those); ``first``: the first one's number."""

    path: str | None
    frames: list[bytes]
    count: int
    whole: list[int]
    first: int | None

    def blocks(self) -> Iterator[tuple[list[tuple[Any, ...]], list[list[tuple[str, int]]]]]:
        """(rounds, prompt lengths set before each) a block at a time, in order."""
        if self.path is None:
            for frame in self.frames:
                yield _loaded(frame[:1], frame[1:])
            return
        with open(self.path, "rb") as fh:
            while head := fh.read(9):
                size = int.from_bytes(head[1:], "little")
                yield _loaded(head[:1], fh.read(size))


def _loaded(kind: bytes, data: bytes) -> Any:
    """One block read back (the collector held off while its tuples are made)."""
    with held_off():
        return marshal.loads(data) if kind == _MARSHAL else pickle.loads(data)


class _Spill:
    """The worker's side of ``Spilled``: each owned round waits among the last ``window``
    (whole: the join keeps the last ``window`` of the log) and is written out when it
    leaves them, whole or without its evidence as the worker says (``write``)."""

    def __init__(self, directory: str | None, window: int | None, block: int) -> None:
        self.window = None if window is None else max(window, 1)
        self.block = block
        self.fh: BinaryIO | None = None
        self.path: str | None = None
        if directory is not None:
            fd, self.path = tempfile.mkstemp(prefix="range-", suffix=".blocks", dir=directory)
            self.fh = os.fdopen(fd, "wb")
        self.frames: list[bytes] = []
        self.recent: deque[tuple[int, tuple[Any, ...], list[tuple[str, int]]]] = deque()
        self.rows: list[tuple[Any, ...]] = []
        self.sets: list[list[tuple[str, int]]] = []
        self.whole: list[int] = []
        self.count = 0
        self.first: int | None = None

    def add(
        self, packed: tuple[Any, ...], sets: list[tuple[str, int]]
    ) -> tuple[int, tuple[Any, ...], list[tuple[str, int]]] | None:
        """The next owned round; returns the one that leaves the last ``window`` (None)."""
        if self.first is None:
            self.first = packed[0]
        self.recent.append((self.count, packed, sets))
        self.count += 1
        if self.window is not None and len(self.recent) > self.window:
            return self.recent.popleft()
        return None

    def write(self, at: int, packed: tuple[Any, ...], sets: list[tuple[str, int]], *,
              whole: bool) -> None:  # fmt: skip
        if whole:
            self.whole.append(at)
        self.rows.append(packed if whole else light(packed))
        self.sets.append(sets)
        if len(self.rows) >= self.block:
            self._flush()

    def _flush(self) -> None:
        if not self.rows:
            return
        block = (self.rows, self.sets)
        try:
            frame = _MARSHAL + marshal.dumps(block)
        except ValueError:  # a value marshal does not take
            frame = _PICKLE + pickle.dumps(block, protocol=pickle.HIGHEST_PROTOCOL)
        self.rows, self.sets = [], []
        if self.fh is None:
            self.frames.append(frame)
            return
        self.fh.write(frame[:1] + (len(frame) - 1).to_bytes(8, "little") + frame[1:])

    def close(self) -> Spilled:
        """The last ``window`` written whole; the spill as the join reads it."""
        while self.recent:
            self.write(*self.recent.popleft(), whole=True)
        self._flush()
        if self.fh is not None:
            self.fh.close()
        return Spilled(self.path, self.frames, self.count, self.whole, self.first)


# -- planning -------------------------------------------------------------------------


def rangeable(paths: Sequence[Path], jobs: int) -> bool:
    """One plain (not gzip) file, and more than one worker asked for."""
    return jobs > 1 and len(paths) == 1 and not is_gzip(Path(paths[0]))


def plan(path: Path, n: int) -> list[Window]:
    """The owned windows of up to ``n`` ranges, each cut at a round's first check line;
    fewer where the file is too small or has no such line near a cut."""
    size = path.stat().st_size
    n = max(1, min(n, size // MIN_PART))
    cuts = [0]
    with path.open("rb") as fh:
        for k in range(1, n):
            at = _round_start(fh, k * size // n)
            if at is not None and at > cuts[-1]:
                cuts.append(at)
    cuts.append(size)
    lines = _line_numbers(path, sorted(set(cuts)))
    return [Window(a, b, lines[a]) for a, b in itertools.pairwise(cuts)]


def _round_start(fh: BinaryIO, at: int, span: int = 4 << 20) -> int | None:
    """The first line at or after byte ``at`` that is an adder check line following a line
    that is not an adder line (the first check of a round)."""
    fh.seek(max(0, at - 1))
    buf: bytes = fh.read(span)
    i = buf.find(b"\n")
    while i >= 0:
        j = buf.find(b"\n", i + 1)
        if j < 0:
            return None
        prev_start = buf.rfind(b"\n", 0, i) + 1
        if _CHECK in buf[i + 1 : j] and (prev_start == 0 or _ADDER not in buf[prev_start:i]):
            return max(0, at - 1) + i + 1
        i = j
    return None


def _line_numbers(path: Path, offsets: list[int]) -> dict[int, int]:
    """The 1-based number of the line starting at each offset (a line start)."""
    out: dict[int, int] = {}
    pos, newlines = 0, 0
    want = iter(sorted(offsets))
    nxt = next(want, None)
    with path.open("rb") as fh:
        while nxt is not None:
            block = fh.read(8 << 20)
            while nxt is not None and nxt <= pos + len(block):
                out[nxt] = newlines + block.count(b"\n", 0, nxt - pos) + 1
                nxt = next(want, None)
            if not block:
                break
            newlines += block.count(b"\n")
            pos += len(block)
    return out


def parts(
    path: Path, owned: list[Window], opts: RangeOptions, margin: int, lookahead: int,
    spill: str | None = None,
) -> list[Part]:  # fmt: skip
    """Each owned window with its warm-up before and its look past the next cut."""
    size = path.stat().st_size
    out = []
    for k, own in enumerate(owned):
        pre = _back(path, own, margin)
        post = None
        if k + 1 < len(owned):
            nxt = owned[k + 1]
            end = _line_end(path, min(size, nxt.start + lookahead))
            post = Window(nxt.start, end, nxt.line)
        out.append(Part(str(path), k, pre, own, post, opts, spill, BLOCK))
    return out


def _back(path: Path, own: Window, margin: int) -> Window:
    """The warm-up window: from a line start about ``margin`` bytes before ``own`` (from
    the start of the file when that is nearer)."""
    if own.start == 0 or margin <= 0:
        return Window(own.start, own.start, own.line)
    start = own.start - margin
    if start <= 0:
        return Window(0, own.start, 1)
    with path.open("rb") as fh:
        fh.seek(start - 1)
        buf = fh.read(own.start - start + 1)
    cut = _first_prefixed(buf)
    if cut is None:
        return Window(own.start, own.start, own.line)
    return Window(start - 1 + cut, own.start, own.line - buf.count(b"\n", cut))


def _first_prefixed(buf: bytes) -> int | None:
    """Offset in ``buf`` of the first line that starts with a log prefix (``[``)."""
    i = buf.find(b"\n[")
    return i + 1 if i >= 0 else None


def _line_end(path: Path, at: int) -> int:
    """The end of the line holding byte ``at`` (just past its newline)."""
    with path.open("rb") as fh:
        fh.seek(at)
        while True:
            block = fh.read(64 << 10)
            if not block:
                return fh.tell()
            i = block.find(b"\n")
            if i >= 0:
                return at + i + 1
            at += len(block)


# -- a worker ---------------------------------------------------------------------------


def run_part(part: Part) -> PartResult:
    """One range: read, rebuild and re-run it (what a worker process runs)."""
    # the rounds waiting to be written and the re-runs' nodes would be walked by the
    # collector again and again, for no cyclic garbage (measured: a fifth of the run)
    with held_off():
        return _Worker(part).run()


def _first_line(rnd: Round) -> int | None:
    """The line number of the round's first check line (None: it logged none)."""
    if not rnd.decisions:
        return None
    where = rnd.decisions[0].where or ""
    tail = where.rpartition(":")[2]
    return int(tail) if tail.isdigit() else None


def _plain(rnd: Round) -> dict[str, Any]:
    """The round as data, without its number (which differs between two workers)."""
    d = rnd.as_dict()
    del d["round"]
    return d


class _Worker:
    def __init__(self, part: Part) -> None:
        self.part = part
        self.path = Path(part.path)
        self.cat: Catalogue = load_catalogue(part.opts.formats)
        self.wrapper: Wrapper | None = learn(sniff(self.path), self.cat)
        self.cutter = _Cutter(self.cat, self.wrapper)
        self.out = PartResult(part.index)
        self.fs = self._file_summary()
        self.out.summary.files.append(self.fs)
        opts = part.opts
        self.ls = LogStream([self.path], dict(opts.overrides), opts.rank, opts.formats, hold=True)
        self._head()
        rb = self.rebuilder
        self.lens: dict[str, int] = {}
        rb.seq_lens = self.lens
        rb.noted = []  # each prompt length the rebuild sets, for the join to set in order
        self._late = rb._late  # rebound only when the rebuild finishes
        assert self.ls.cfg is not None
        self._cont = Continuity(self.ls.cfg.page_size)
        #: positions of the owned rounds that go whole; rid -> its truncation rounds
        self._whole: set[int] = set()
        self._cut: dict[str, list[int]] = {}
        known = Known(self.ls.cfg, self.lens)
        self.checks = Checks(known, opts.profile, opts.whole) if opts.rerun else None
        self.spill = _Spill(part.spill, opts.window, part.block)
        self._refused = 0  # refusals the re-runs have found so far

    @property
    def rebuilder(self) -> Rebuilder:
        assert self.ls.rebuilder is not None
        return self.ls.rebuilder

    def _file_summary(self) -> FileSummary:
        fs = FileSummary(self.part.path, False, self.path.stat().st_size)
        fs.wrapper = self.wrapper.says() if self.wrapper else None
        return fs

    def _head(self) -> None:
        """The configuration and the deciding rank, from the same frames one pass takes
        them from (the log's head up to the frame with the first adder line, in the same
        chunks), read one chunk at a time."""
        head = ParseSummary()
        whole = Window(0, self.path.stat().st_size, 1)
        fs = FileSummary(self.part.path, False, whole.end)
        held: list[pl.DataFrame] = []
        for frame in _WindowReader(self, whole, head, fs, eof=True, shown=False).frames():
            held.append(frame)
            if frame.height and (frame["kind"] == "adder_check").any():
                break
        else:
            raise NotRanged("no adder line")
        head.files.append(fs)
        self.ls.summary = head
        self.ls._start(held)
        self.ls.summary = self.out.summary

    def run(self) -> PartResult:
        p, out = self.part, self.out
        lo = p.own.line if p.index > 0 else 0
        hi = p.post.line if p.post is not None else None
        recent: deque[Round] = deque(maxlen=AGREE)
        owning = p.index == 0
        for rnd in self._rounds():
            sets, self.rebuilder.noted = self.rebuilder.noted or [], []
            line = _first_line(rnd)
            if not owning:
                if line is None or line < lo:
                    self._cont.add(rnd)
                    recent.append(rnd)
                    self._forget(rnd)
                    continue
                owning, out.head = True, self._boundary(rnd, recent)
            self._continuity(rnd)
            if hi is not None and line is not None and line >= hi:
                out.tail = self._boundary(rnd, recent)
                break
            if rnd.oom is not None and p.post is not None:
                raise NotRanged("an out-of-memory line before the last range")
            self._own(rnd, sets)
            recent.append(rnd)
            self._forget(rnd)
        if (p.index > 0 and out.head is None) or (p.post is not None and out.tail is None):
            raise NotRanged("a range without a round of its own, or a lookahead too short")
        self._collect()
        out.spilled = self.spill.close()
        return out

    def _own(self, rnd: Round, sets: list[tuple[str, int]]) -> None:
        """A round of this range: re-run, its truncations noted, packed for the join."""
        at = self.spill.count
        if rnd.oom is not None:
            self.out.ooms[at] = rnd.oom
            self._whole.add(at)
        if self.checks is not None:
            self.checks.add(rnd)
            if self._refusals() > self._refused:  # a fix refused in it: the join keeps it
                self._refused = self._refusals()
                self._whole.add(at)
        for d in rnd.decisions:
            if d.decision == "truncated":
                self._cut.setdefault(d.rid, []).append(at)
        left = self.spill.add(pack(rnd), sets)
        if left is not None:
            self.spill.write(*left, whole=self._keeps(left[0]))

    def _refusals(self) -> int:
        wl = self.checks.wholelog if self.checks is not None else None
        return 0 if wl is None else sum(len(got) for got in wl.refused.values())

    def _keeps(self, at: int) -> bool:
        """Does the join keep the round at ``at`` once it has left the last ``window``?
        The rounds whole (below) and the truncations of requests still unfinished."""
        return at in self._whole or any(at in got for got in self._cut.values())

    def _continuity(self, rnd: Round) -> None:
        """Where the join's continuity check finds a fall, it words both rounds' evidence:
        those two go whole (each range sees the pair across its first cut)."""
        found = len(self._cont.found)
        self._cont.add(rnd)
        if len(self._cont.found) > found:
            last = self.spill.count - 1
            self._whole.update((last, last + 1))

    def _forget(self, rnd: Round) -> None:
        for rid in finished(rnd, self.lens):
            del self.lens[rid]
            self._cut.pop(rid, None)

    def _boundary(self, rnd: Round, before: deque[Round]) -> Boundary:
        rb = self.rebuilder
        base = rb.base_end.value if rb.base_end is not None else None
        state = (rb.chunked, base, rb._silent, rb._printed_at, rb.block, len(rb._held),
                 rb.count - rnd.index)  # fmt: skip
        rounds = [_plain(r) for r in (*before, rnd)]
        return Boundary(rnd.index, rounds, dict(self.lens), state)

    def _rounds(self) -> Iterator[Round]:
        p = self.part
        yield from self._feed(p.pre, own=False)
        yield from self._feed(p.own, own=True, eof=p.post is None)
        if p.post is not None:
            yield from self._feed(p.post, own=False)
        else:
            yield from self.rebuilder.finish()

    def _feed(self, win: Window, own: bool, eof: bool = False) -> Iterator[Round]:
        if win.end <= win.start:
            return
        if own:
            summary, fs = self.out.summary, self.fs
        else:
            summary, fs = ParseSummary(), FileSummary(self.part.path, False, 0)
        reader = _WindowReader(self, win, summary, fs, eof)
        for frame in reader.frames():
            if own:
                yield from self.ls._frame(frame)
                continue
            mine = pl.col("kind").is_in(KINDS) & (pl.col("rank") == self.ls.rank)
            feed = self.rebuilder.feed
            for ev in rows_of(frame.filter(mine)):
                yield from feed(ev)
        if own:
            self.out.nul += reader.nul

    def _collect(self) -> None:
        """What the join needs besides the rounds: the rebuild's findings of the rounds
        owned here, the re-runs' results, the stream's side events."""
        out, rb, ls = self.out, self.rebuilder, self.ls
        lo = out.head.index if out.head is not None else 0
        hi = out.tail.index if out.tail is not None else None

        def mine(i: int | None) -> bool:
            if i is None:
                return self.part.index == 0
            return i >= lo and (hi is None or i < hi)

        late = list(self._late)
        regular = (
            rb.contradictions[: len(rb.contradictions) - len(late)]
            if hi is None
            else rb.contradictions
        )
        out.contradictions = [c for c in regular if mine(c.round)]
        out.late = [c for c in late if mine(c.round)]
        out.drops = [d for d in rb.drops if mine(d.before_round)]
        if self.part.index > 0 and self._names_rounds():
            raise NotRanged("a finding whose text names a round number")
        out.oom, out.count = (rb.oom, rb.count) if hi is None else (None, 0)
        out.first_write, out.block = rb.segmenter.first_write, rb.block
        out.chunked, out.base_end = rb.chunked, rb.base_end
        out.side, out.spans, out.has_ms = ls._side, ls.spans, ls.has_ms
        out.cfg, out.config, out.rank = ls.cfg, ls.config, ls.rank
        if self.checks is None:
            return
        fid = self.checks.fidelity
        out.checked, out.mismatches = fid.checked, fid.mismatches
        wl = self.checks.wholelog
        if wl is not None:
            out.gaps, out.rerun = wl.gaps, wl.rerun
            out.margins = [tuple(cols) for cols in wl.margins.rows.chunks()]
            out.refused = {p: [(r.index, rid) for r, rid in got] for p, got in wl.refused.items()}

    def _names_rounds(self) -> bool:
        out = self.out
        texts = [c.detail for c in (*out.contradictions, *out.late)]
        texts += [e for d in out.drops for e in d.evidence]
        if self.spill.count and self.rebuilder.oom is not None:
            texts.append(str(self.rebuilder.oom))
        return any(_ROUND_NUMBER.search(t) for t in texts)


class _WindowReader:
    """Event frames of a byte window, cut into chunks as the reader cuts a whole file
    (``logs.reader``), numbered from the window's first line."""

    def __init__(
        self, w: _Worker, win: Window, summary: ParseSummary, fs: FileSummary, eof: bool,
        shown: bool = True,
    ) -> None:  # fmt: skip
        self.w, self.win, self.summary, self.fs, self.eof = w, win, summary, fs, eof
        self.shown = shown  # the bytes count on the display (not the head's second read)
        self.line = win.line
        self.nul = 0

    def frames(self) -> Iterator[pl.DataFrame]:
        blocks: list[bytes] = []
        size, left = 0, self.win.end - self.win.start
        with open(self.w.path, "rb") as fh:
            fh.seek(self.win.start)
            while left > 0:
                block = fh.read(min(4 << 20, left))
                if not block:
                    break
                left -= len(block)
                self.fs.bytes_read += len(block)
                if self.shown:
                    _count(len(block))
                blocks.append(block)
                size += len(block)
                if size < CHUNK_BYTES:
                    continue
                buf = b"".join(blocks)
                cut = self.w.cutter.cut(buf)
                if cut == 0:
                    if len(buf) >= MAX_CARRY:
                        raise NotRanged("a very long line")
                    blocks, size = [buf], len(buf)
                    continue
                yield self._events(buf[:cut], False)
                rest = buf[cut:]
                blocks, size = ([rest], len(rest)) if rest else ([], 0)
        buf = b"".join(blocks)
        cut_last = self.eof and bool(buf) and not buf.endswith(b"\n")
        if self.eof:
            self.fs.cut_last_line = cut_last
        yield self._events(buf, cut_last)

    def _events(self, chunk: bytes, cut_last: bool) -> pl.DataFrame:
        self.nul += chunk.count(b"\x00")
        lines = split_lines(chunk)
        got = extract_chunk(
            lines, self.line, self.w.part.path, self.w.cat, cut_last, self.w.wrapper
        )
        self.line += len(lines)
        self.fs.lines += len(lines)
        return _collect(got, self.summary, self.fs)


# -- the join -----------------------------------------------------------------------------


@dataclass
class Joined:
    """The ranges joined: ``stream`` stands for the one pass's ``LogStream`` once it has
    ended (summary, side events, configuration, the rebuild's findings); ``rounds`` gives
    every round in order with the prompt lengths set before it; ``checks`` the re-runs'
    results as one pass's ``Checks`` would hold them."""

    stream: LogStream
    results: list[PartResult]
    deltas: list[int]

    #: round index -> the round, for the rounds a fix refused in (``JoinedChecks``)
    refused_rounds: dict[int, Round] = field(default_factory=dict)
    #: per range: its first round's number and the positions sent with their evidence
    _whole: list[tuple[int, set[int]]] = field(default_factory=list)
    #: the directory the workers wrote their rounds into, removed by ``close``
    spill: tempfile.TemporaryDirectory[str] | None = None

    def close(self) -> None:
        """The workers' rounds removed from the disk (read them first)."""
        if self.spill is not None:
            self.spill.cleanup()

    def _wanted(self) -> set[int]:
        """The numbers of the rounds a fix refused in (``JoinedChecks``)."""
        return {i + d for r, d in zip(self.results, self.deltas, strict=True)
                for got in r.refused.values() for i, _ in got}  # fmt: skip

    def _packed(self) -> Iterator[Packed]:
        """Each range's rounds a block at a time, in order (one block in memory)."""
        want = self._wanted()
        for r, d in zip(self.results, self.deltas, strict=True):
            sp = r.spilled
            assert sp is not None, "every worker spills its rounds"
            if sp.first is not None:
                self._whole.append((sp.first + d, set(sp.whole)))
            at = 0
            for rows, sets in sp.blocks():
                ooms = {i - at: o for i, o in r.ooms.items() if at <= i < at + len(rows)}
                part = Packed(rows, sets, ooms, d, want)
                yield part
                self.refused_rounds.update(part.found)
                at += len(rows)
            assert at == sp.count, "every round owned was written"

    def rounds(self) -> Iterator[tuple[Round, list[tuple[str, int]]]]:
        """Every round in order, with the prompt lengths set before it."""
        for part in self._packed():
            for i in range(len(part.rows)):
                yield part.round_at(i), part.sets[i]

    def fold(self, ps: RoundPass, shown: Callable[[int], None], block: int = 4096) -> None:
        """Every round through ``ps`` in order (``RoundPass.add_packed``), ``shown`` told
        the count after each ``block`` of them.

        NOTE: the collector is held off throughout: each block read back is a young
        generation of several hundred thousand tuples the collector would walk again and
        again while the pass goes through them (measured, a third of this loop's time)."""
        with held_off():
            for part in self._packed():
                for start in range(0, len(part.rows), block):
                    end = min(start + block, len(part.rows))
                    ps.add_packed(part, start, end)
                    shown(end - start)

    def whole(self, rounds: list[Round]) -> None:
        """Raise ``NotRanged`` if a round kept came without its evidence (never seen: the
        workers send whole every round the pass may keep)."""
        for rnd in rounds:
            at = max((x for x in self._whole if x[0] <= rnd.index), default=None,
                     key=lambda x: x[0])  # fmt: skip
            if at is not None and rnd.index - at[0] not in at[1]:
                raise NotRanged(f"round {rnd.index} kept was sent without its evidence")

    def checks(self, known: Known, profile: Profile, whole: bool) -> JoinedChecks:
        return JoinedChecks(known, profile, whole, self)


class JoinedChecks(Checks):
    """The workers' re-runs, as one pass's ``Checks`` holds them once every round went by;
    a round another rank's lines add after the stream is re-run here. The refusals'
    rounds are the pass's own objects, attached once it has seen them (``attach``)."""

    def __init__(self, known: Known, profile: Profile, whole: bool, joined: Joined) -> None:
        super().__init__(known, profile, whole)
        self.joined = joined
        fid, wl = self.fidelity, self.wholelog
        for r, d in zip(joined.results, joined.deltas, strict=True):
            fid.checked += r.checked
            fid.mismatches += [dataclasses.replace(m, round=m.round + d) for m in r.mismatches]
            if wl is None:
                continue
            wl.gaps += [dataclasses.replace(g, round=g.round + d) for g in r.gaps]
            wl.rerun += r.rerun
            for cols in r.margins:
                for index, *rest in zip(*cols, strict=True):
                    wl.margins.rows.push(index + d, *rest)
            for got in r.refused.values():
                wl.refused_rounds.update(i + d for i, _ in got)

    def attach(self) -> None:
        """The refusals, with their rounds (once the pass has gone through them)."""
        wl, j = self.wholelog, self.joined
        if wl is None:
            return
        for r, d in zip(j.results, j.deltas, strict=True):
            for policy, got in r.refused.items():
                wl.refused[policy] += [(j.refused_rounds[i + d], rid) for i, rid in got]

    def add(self, rnd: Round, lens: dict[str, int] | None = None, late: bool = False) -> None:
        if late:  # the stream's rounds were re-run by the workers
            super().add(rnd, lens, late)


def run_ranges(
    path: Path,
    jobs: int,
    opts: RangeOptions,
    *,
    engine: str = "local",
    margin: int | None = None,
    lookahead: int | None = None,
) -> Joined:
    """``path`` over ``jobs`` workers, each reading and re-running as ``opts`` says.
    Raises ``NotRanged`` where the one pass must be made instead."""
    margin = MARGIN if margin is None else margin
    lookahead = LOOKAHEAD if lookahead is None else lookahead
    owned = plan(path, jobs)
    if len(owned) < 2:
        raise NotRanged("too small to split")
    # a local pool's workers write their rounds to the disk (memory flat in the log's
    # size); a Ray task's come back with its result
    spill = tempfile.TemporaryDirectory(prefix="kvforensics-") if engine == "local" else None
    todo = parts(path, owned, opts, margin, lookahead, None if spill is None else spill.name)
    try:
        results = _joinable(path, todo, engine, jobs, margin)
    except BaseException:
        if spill is not None:
            spill.cleanup()
        raise
    deltas = [0]
    for k in range(1, len(results)):
        head, tail = results[k].head, results[k - 1].tail
        assert head is not None and tail is not None
        deltas.append(tail.index + deltas[-1] - head.index)
    for r, d in zip(results, deltas, strict=True):
        _shift(r, d)
    return Joined(_stream(path, results, opts), results, deltas, spill=spill)


def _joinable(
    path: Path, todo: list[Part], engine: str, jobs: int, margin: int
) -> list[PartResult]:
    """Every part run, a part run again from further back until it agrees with the one
    before it where they meet."""
    results = _map(todo, engine, jobs)
    for k in range(1, len(todo)):
        wider = margin
        while not _agree(results[k - 1], results[k], todo[k]):
            if todo[k].pre.start == 0:
                raise NotRanged("a range read from the start disagrees")  # never seen
            wider *= 8
            todo[k] = dataclasses.replace(todo[k], pre=_back(path, todo[k].own, wider))
            results[k] = _safely(todo[k])
    return results


def _agree(before: PartResult, after: PartResult, part: Part) -> bool:
    """Do two neighbours see the round where ``after`` begins the same way?"""
    tail, head = before.tail, after.head
    if tail is None or head is None:
        return False
    if part.pre.start == 0:  # read from the start: numbered and rebuilt as one pass
        return True
    return (tail.rounds, tail.seq_lens, tail.state) == (head.rounds, head.seq_lens, head.state)


def _safely(part: Part) -> PartResult:
    try:
        return run_part(part)
    except NotRanged:
        raise
    except Exception as exc:  # the one pass says what is wrong, in its words
        raise NotRanged(f"{type(exc).__name__}: {exc}") from exc


def _shift(r: PartResult, d: int) -> None:
    """Move a worker's round numbers to the log's."""
    if not d:
        return
    r.contradictions = [_moved(c, d) for c in r.contradictions]
    r.late = [_moved(c, d) for c in r.late]
    r.drops = [dataclasses.replace(x, after_round=x.after_round + d,
                                   before_round=x.before_round + d) for x in r.drops]  # fmt: skip
    if r.oom is not None and r.oom.round is not None:
        r.oom = dataclasses.replace(r.oom, round=r.oom.round + d)
    r.count += d


def _moved(c: Contradiction, d: int) -> Contradiction:
    return c if c.round is None else dataclasses.replace(c, round=c.round + d)


def _stream(path: Path, results: list[PartResult], opts: RangeOptions) -> LogStream:
    """A ``LogStream`` as one pass leaves it, from the workers' shares."""
    first, last = results[0], results[-1]
    if any(r.nul for r in results):
        raise NotRanged("NUL bytes")
    ls = LogStream([path], dict(opts.overrides), first.rank, opts.formats, hold=True)
    ls.cfg, ls.config = first.cfg, first.config
    ls.summary = _summary(path, results)
    for r in results:
        ls._side += r.side
        ls.spans = merge_spans(ls.spans, r.spans)
        ls.has_ms = ls.has_ms or r.has_ms
    rb = Rebuilder(ls.settled_cfg())
    rb.contradictions = [c for r in results for c in r.contradictions]
    rb.contradictions += [c for r in results for c in r.late]
    rb.drops = [x for r in results for x in r.drops]
    rb.oom, rb.count = last.oom, last.count
    rb.chunked, rb.base_end = last.chunked, last.base_end
    rb.block = next((r.block for r in results if r.block is not None), None)
    rb.segmenter.first_write = next(
        (r.first_write for r in results if r.first_write is not None), None
    )
    ls.rebuilder = rb
    present = {x for r in results for f in r.summary.files for x in f.ranks}
    if opts.rank and opts.rank not in present:
        raise NotRanged("the rank asked for is not in the log")
    return ls


def _summary(path: Path, results: list[PartResult]) -> ParseSummary:
    """The workers' read summaries as one: counts added, samples in line order."""
    s = ParseSummary()
    fs = FileSummary(str(path), False, path.stat().st_size)
    fs.wrapper = results[0].summary.files[0].wrapper
    s.files.append(fs)
    for r in results:
        f = r.summary.files[0]
        fs.bytes_read += f.bytes_read
        fs.lines += f.lines
        fs.ranks |= f.ranks
        fs.cut_last_line = f.cut_last_line
        s.add_counts(r.summary, UNMATCHED_SAMPLES)
    return s


# -- where the workers run ------------------------------------------------------------


def check_engine(engine: str) -> None:
    """``--engine``: one of ``ENGINES`` (exit 2 naming them otherwise)."""
    if engine not in ENGINES:
        raise InputError(f"--engine {engine}: choose from {', '.join(ENGINES)}")


def _map(todo: list[Part], engine: str, jobs: int) -> list[PartResult]:
    """Every part on a local pool (spawned: polars' threads do not survive a fork) or as
    Ray tasks; a worker that failed makes the whole one pass instead. The bytes the
    workers read are a stage of the command's display."""
    check_engine(engine)
    total = sum(w.end - w.start for p in todo for w in (p.pre, p.own, p.post) if w is not None)
    shown = current().stage(f"reading and re-running ({min(jobs, len(todo))} workers)",
                            total, "bytes")  # fmt: skip
    if engine == "ray":
        got = _ray(todo)
        shown.to(total)
        shown.done()
        return got
    ctx = multiprocessing.get_context("spawn")
    read = ctx.Value("q", 0)
    with ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=ctx,
                             initializer=_counting, initargs=(read,)) as pool:  # fmt: skip
        futures = [pool.submit(run_part, p) for p in todo]
        while wait(futures, timeout=0.25).not_done:
            shown.to(read.value)
        shown.to(read.value)
        shown.done()
        return [_result(f.result) for f in futures]


#: in a worker of the local pool: the bytes read by all of them (``_map``'s display)
_READ: Any = None


def _counting(read: Any) -> None:
    """A worker's start: where it adds the bytes it reads."""
    global _READ
    _READ = read


def _count(n: int) -> None:
    if _READ is not None:
        with _READ.get_lock():
            _READ.value += n


def _result(get: Callable[[], PartResult]) -> PartResult:
    try:
        return get()
    except NotRanged:
        raise
    except Exception as exc:  # a worker that died, or an input error the one pass words
        raise NotRanged(f"{type(exc).__name__}: {exc}") from exc


def _ray_get(ray: Any, ref: Any) -> PartResult:
    got: PartResult = ray.get(ref)
    return got


def _ray(todo: list[Part]) -> list[PartResult]:
    """Each part a Ray task (a running cluster when ``RAY_ADDRESS`` is set, else a local
    one started and stopped here)."""
    try:
        import ray
    except ImportError:
        raise InputError("--engine ray needs Ray: pip install 'kvforensics[fleet]'") from None
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False,
                     logging_level=logging.ERROR)  # fmt: skip
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InputError(f"cannot start or join Ray: {str(exc).splitlines()[0]}") from None
    try:
        task = ray.remote(run_part)
        refs = [task.remote(p) for p in todo]
        return [_result(functools.partial(_ray_get, ray, ref)) for ref in refs]
    finally:
        if started:
            ray.shutdown()
