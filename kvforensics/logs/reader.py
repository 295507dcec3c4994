"""Log files -> event frames, streamed in chunks so memory stays flat whatever the size.

Bytes are cut into chunks only at the start of a prefixed line (never inside a
multi-line message), split into lines by polars' CSV reader (multi-threaded, no Python
object per line) and handed to `extract_chunk` on a small thread pool; results come
back in file order.
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import polars as pl

from kvforensics.errors import InputError
from kvforensics.logs.catalogue import load_catalogue
from kvforensics.logs.extract import UNMATCHED_SAMPLES, ChunkStats, extract_chunk
from kvforensics.logs.forms import Catalogue
from kvforensics.logs.source import check_readable, is_gzip, iter_bytes
from kvforensics.logs.summary import FileSummary, ParseSummary
from kvforensics.logs.wrapper import Wrapper, learn
from kvforensics.progress import Stages, current

CHUNK_BYTES = 8 << 20
# A single line, or a multi-line message, longer than this cannot be kept whole (no
# scheduler line comes near it; reading one line costs some 30 times its size).
MAX_CARRY = 16 << 20
PROGRESS_MIN_BYTES = 4 << 20
SNIFF_BYTES = 64 << 10
#: the head a file's wrapper is learned from (logs/wrapper.py)
LEARN_BYTES = 256 << 10
LEARN_LINES = 4000


def split_lines(buf: bytes) -> pl.Series:
    """Lines of `buf` (no newlines; invalid UTF-8 replaced; empty lines null)."""
    if not buf:
        return pl.Series("text", [], dtype=pl.String)
    # The CSV reader is used with NUL as separator, so NULs must go; they carry no text.
    if b"\x00" in buf:
        buf = buf.replace(b"\x00", b"")
    expected = buf.count(b"\n") + (0 if buf.endswith(b"\n") else 1)
    s = pl.read_csv(
        buf,
        has_header=False,
        separator="\x00",
        quote_char=None,
        schema={"text": pl.String},
        encoding="utf8-lossy",
    )["text"]
    if len(s) != expected:  # never seen; keep line numbers exact whatever the reader does
        text = buf.decode("utf-8", "replace").split("\n")
        s = pl.Series("text", text[:expected], dtype=pl.String)
        e = pl.when(s.str.strip_chars("\r") == "").then(None).otherwise(s.str.strip_suffix("\r"))
        s = pl.select(e.alias("text")).to_series()
    return s


def sniff(path: Path) -> list[str]:
    """Refuse files that are plainly not text, before any work is done; the whole lines
    of the file's head (its wrapper is learned from them)."""
    gaps: list[str] = []
    blocks, size = [], 0
    for block in iter_bytes(path, gaps, read_size=SNIFF_BYTES):
        blocks.append(block)
        size += len(block)
        if size >= LEARN_BYTES:
            break
    whole = b"".join(blocks)
    head = whole[:SNIFF_BYTES]
    if not head:
        return []
    if b"\x00" in head:
        raise InputError(f"{path}: binary data (NUL bytes), not a text log")
    text = head.decode("utf-8", "replace")
    odd = sum(1 for c in text if c == "\ufffd" or (c < " " and c not in "\t\r\n\f\v\x1b"))
    if odd > 0.1 * len(text):
        raise InputError(f"{path}: binary data, not a text log")
    if size >= LEARN_BYTES:  # the last line may be cut
        whole = whole[: whole.rfind(b"\n") + 1]
    lines = whole.decode("utf-8", "replace").replace("\r", "").split("\n")
    return [ln for ln in lines[: LEARN_LINES] if ln.strip()]


class _Cutter:
    """Where a chunk may end: before a prefixed line that is not absorbed by the
    multi-line message above it."""

    def __init__(self, cat: Catalogue, wrapper: Wrapper | None = None) -> None:
        prefix = cat.prefix.regex
        if wrapper is not None:  # the wrapper, then SGLang's prefix
            prefix = wrapper.python_regex + prefix.removeprefix("^")
        self.prefix = re.compile(prefix.encode(), re.MULTILINE)  # `^` at pos
        cont = cat.prefix.continues
        self.continues = re.compile(cont.encode()) if cont else None
        self.absorb = tuple(a.encode() for f in cat.formats if f.multiline for a in f.absorb)

    def cut(self, buf: bytes) -> int:
        """Offset > 0 to cut at, or 0 when `buf` holds no such line start."""
        e = buf.rfind(b"\n")
        while e > 0:
            i = buf.rfind(b"\n", 0, e)
            start = i + 1
            if start == 0:
                return 0
            m = self.prefix.match(buf, start)
            if (
                m
                and not any(buf.startswith(a, m.end()) for a in self.absorb)
                and not (self.continues and self.continues.match(buf, m.end()))
            ):
                return start
            e = i
        return 0


def _chunks(
    path: Path,
    cutter: _Cutter,
    fs: FileSummary,
    gaps: list[str],
    on_read: Callable[[int], None] | None,
    chunk_bytes: int,
) -> Iterator[tuple[bytes, bool]]:
    """(chunk bytes, is_last) for one file."""
    blocks: list[bytes] = []
    size = 0
    for block in iter_bytes(path, gaps, on_read, read_size=min(chunk_bytes, 4 << 20)):
        fs.bytes_read += len(block)
        blocks.append(block)
        size += len(block)
        if size < chunk_bytes:
            continue
        buf = b"".join(blocks)
        cut = cutter.cut(buf)
        if cut == 0 and len(buf) >= MAX_CARRY:
            cut = buf.rfind(b"\n") + 1
            if cut == 0:
                raise InputError(
                    f"{path}: a line longer than {MAX_CARRY >> 20} MiB "
                    f"near byte {fs.bytes_read}; not a scheduler log"
                )
            gaps.append(
                f"{path}: a multi-line message longer than {MAX_CARRY >> 20} MiB "
                f"was split near byte {fs.bytes_read}"
            )
        if cut == 0:
            blocks, size = [buf], len(buf)  # wait for more data
            continue
        yield buf[:cut], False
        rest = buf[cut:]
        blocks, size = ([rest], len(rest)) if rest else ([], 0)
    buf = b"".join(blocks)
    if len(buf) > MAX_CARRY and max(map(len, buf.split(b"\n"))) > MAX_CARRY:
        # the file ended before the loop above saw the line outgrow the limit
        raise InputError(
            f"{path}: a line longer than {MAX_CARRY >> 20} MiB "
            f"near byte {fs.bytes_read}; not a scheduler log"
        )
    fs.cut_last_line = bool(buf) and not buf.endswith(b"\n")
    yield buf, True


def iter_events(
    paths: Iterable[Path | str],
    summary: ParseSummary,
    extra_formats: list[Path] | None = None,
    progress: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
    workers: int | None = None,
    catalogue: Catalogue | None = None,
    stages: Stages | None = None,
    label: str = "reading logs",
) -> Iterator[pl.DataFrame]:
    """Event frames in file and line order; `summary` is filled as they are produced.
    The bytes read are a stage (``label``) of ``stages`` (default: the command's display).

    Raises InputError (one line) for inputs that cannot be read at all.
    """
    files = [Path(p) for p in paths]
    if not files:
        raise InputError("no log files given")
    seen: set[Path] = set()
    for p in files:
        check_readable(p)
        if p.resolve() in seen:
            raise InputError(f"{p}: given twice")
        seen.add(p.resolve())
    cat = catalogue or load_catalogue(extra_formats)
    heads = {p: sniff(p) for p in files}
    workers = workers or min(4, os.cpu_count() or 2)
    total = sum(p.stat().st_size for p in files)

    with ExitStack() as stack:
        # a stage of the command's display; ``progress`` alone opens a display of its own
        shown = stages or current()
        if progress and not shown.enabled and total > PROGRESS_MIN_BYTES:
            shown = stack.enter_context(Stages())
        on_read = shown.reader(label, total)
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=workers))
        for path in files:
            fs = FileSummary(str(path), is_gzip(path), path.stat().st_size)
            summary.files.append(fs)
            if fs.bytes_on_disk == 0:
                summary.gaps.append(f"{path}: empty file")
                continue
            wrapper = learn(heads[path], cat)
            fs.wrapper = wrapper.says() if wrapper else None
            cutter = _Cutter(cat, wrapper)
            pending: deque[Any] = deque()
            nul = 0
            for chunk, last in _chunks(path, cutter, fs, summary.gaps, on_read, chunk_bytes):
                if b"\x00" in chunk:  # e.g. the zero-filled tail a crash leaves on some filesystems
                    nul += chunk.count(b"\x00")
                lines = split_lines(chunk)
                pending.append(
                    pool.submit(
                        extract_chunk,
                        lines,
                        fs.lines + 1,
                        str(path),
                        cat,
                        last and fs.cut_last_line,
                        wrapper,
                    )
                )
                fs.lines += len(lines)
                while len(pending) > workers:
                    yield _collect(pending.popleft().result(), summary, fs)
            while pending:
                yield _collect(pending.popleft().result(), summary, fs)
            if nul:
                summary.gaps.append(f"{path}: {nul} NUL bytes (binary data) dropped")
    if summary.lines == 0:
        raise InputError("no log lines in the input: " + "; ".join(summary.gaps or ["empty"]))


def _collect(
    result: tuple[pl.DataFrame, ChunkStats], summary: ParseSummary, fs: FileSummary
) -> pl.DataFrame:
    events, st = result
    for k, v in st.matched.items():
        summary.matched[k] = summary.matched.get(k, 0) + v
    summary.unmatched += st.unmatched
    summary.attached_lines += st.attached
    summary.blank_lines += st.blank
    summary.prefixed_lines += st.prefixed
    room = UNMATCHED_SAMPLES - len(summary.unmatched_samples)
    summary.unmatched_samples += [(fs.path, n, t) for n, t in st.unmatched_samples[: max(room, 0)]]
    summary.unreadable += st.unreadable
    room = UNMATCHED_SAMPLES - len(summary.unreadable_samples)
    summary.unreadable_samples += [
        (fs.path, n, t) for n, t in st.unreadable_samples[: max(room, 0)]
    ]
    if events.height:
        fs.ranks.update(r for r in events["rank"].unique().to_list() if r)
        # a prefix was read (a rank or a time of day) but no date
        undated = events["time"].is_null() & (events["clock"].is_not_null() | (events["rank"] != ""))
        summary.undated_events += int(undated.sum())
    return events


def read_events(
    paths: Iterable[Path | str],
    extra_formats: list[Path] | None = None,
    progress: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
) -> tuple[pl.DataFrame, ParseSummary]:
    """All events in one frame (fine for incident-sized logs; stream with `iter_events`)."""
    summary = ParseSummary()
    cat = load_catalogue(extra_formats)
    frames = list(
        iter_events(paths, summary, progress=progress, chunk_bytes=chunk_bytes, catalogue=cat)
    )
    if not frames:
        return pl.DataFrame(schema=cat.schema()), summary
    return pl.concat(frames, how="vertical"), summary
