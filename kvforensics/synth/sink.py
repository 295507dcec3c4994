"""Write lines to a plain or gzip file, byte-for-byte reproducibly."""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterable
from pathlib import Path


def write_log(path: str | Path, lines: Iterable[str]) -> int:
    """Write ``lines`` (newline-terminated) to ``path``; gzip when it ends in ``.gz``
    (no file name, mtime 0, so the bytes depend on the text only). Returns the line count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with open(tmp, "wb") as raw:
        out = (
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9)
            if path.suffix == ".gz"
            else raw
        )
        try:
            for line in lines:
                out.write(line.encode("utf-8") + b"\n")
                n += line.count("\n") + 1
        finally:
            if out is not raw:
                out.close()
    os.replace(tmp, path)
    return n
