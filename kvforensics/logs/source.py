"""Raw bytes of one log file, plain or gzip (told by magic bytes, not by name).

A damaged gzip is read as far as it decompresses; the loss is reported as a gap
rather than an error, because the lines before the damage are usually the evidence.
"""

from __future__ import annotations

import errno
import os
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from kvforensics.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
READ_SIZE = 4 << 20
OUT_PIECE = 256 << 10


def check_readable(path: Path) -> None:
    """One-line errors for inputs that cannot be a log at all."""
    if not path.exists():
        # exists() is False for a link loop too: say which it is
        raise InputError(f"{path}: {'a symlink loop' if _loops(path) else 'no such file'}")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, expected a log file")
    if not path.is_file():
        raise InputError(f"{path}: not a regular file")
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise InputError(f"{path}: cannot open: {exc.strerror or exc}") from None


def _loops(path: Path) -> bool:
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def is_gzip(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(2) == GZIP_MAGIC


def iter_bytes(
    path: Path,
    gaps: list[str],
    on_read: Callable[[int], None] | None = None,
    read_size: int = READ_SIZE,
) -> Iterator[bytes]:
    """Decompressed bytes of `path` in blocks. `on_read(n)` gets on-disk bytes consumed."""
    gz = is_gzip(path)
    with path.open("rb") as fh:
        if not gz:
            while block := fh.read(read_size):
                if on_read:
                    on_read(len(block))
                yield block
            return
        yield from _gunzip(fh, path, gaps, on_read, read_size)


def _gunzip(
    fh: IO[bytes], path: Path, gaps: list[str], on_read: Callable[[int], None] | None,
    read_size: int,
) -> Iterator[bytes]:
    # zlib directly (not gzip.open) so that output decoded before damage is kept and the
    # members of a concatenated .gz (rotated logs joined with cat) are all read.
    d = zlib.decompressobj(wbits=31)
    out_total = 0
    while True:
        block = fh.read(read_size)
        if on_read and block:
            on_read(len(block))
        if not block:
            if not d.eof and out_total:
                gaps.append(
                    f"{path}: gzip stream ends early (truncated file); "
                    f"read {out_total} bytes of log before the cut"
                )
            elif not d.eof:
                gaps.append(f"{path}: gzip stream ends early before any log data")
            return
        data = block
        while data:
            try:
                # bounded output per call: on damage only the last small piece is lost
                out = d.decompress(data, OUT_PIECE)
            except zlib.error as exc:
                gaps.append(
                    f"{path}: corrupt gzip data after {out_total} bytes of log "
                    f"({exc}); the rest of the file is not read"
                )
                return
            if out:
                out_total += len(out)
                yield out
            if not d.eof:
                data = d.unconsumed_tail
                continue
            data = d.unused_data
            if data and not data.startswith(GZIP_MAGIC):
                if data.strip(b"\x00"):
                    gaps.append(
                        f"{path}: {len(data)}+ bytes of non-gzip data after the "
                        f"compressed stream were not read"
                    )
                return
            if not data:
                # the next member may start in the next block
                nxt = fh.read(2)
                if not nxt:
                    return
                fh.seek(-len(nxt), 1)
                if nxt != GZIP_MAGIC[: len(nxt)]:
                    if nxt.strip(b"\x00"):
                        gaps.append(
                            f"{path}: trailing non-gzip data after the "
                            f"compressed stream was not read"
                        )
                    return
            d = zlib.decompressobj(wbits=31)
