"""Writing results: always atomically, never over an input file."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from kvforensics.errors import InputError


def check_not_input(out: Path, inputs: Iterable[Path]) -> None:
    """Refuse to write an output over one of the inputs."""
    target = out.resolve()
    for p in inputs:
        if Path(p).resolve() == target:
            raise InputError(f"refusing to write {out}: it is one of the input files")


def atomic_write(out: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` on a temporary file next to ``out``, then rename it into place.

    A crash half-way leaves ``out`` untouched (or absent), never half-written.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        # mkstemp makes the file private; an output is an ordinary file.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)
        os.replace(tmp_path, out)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def atomic_write_text(out: Path, text: str) -> None:
    atomic_write(out, lambda p: p.write_text(text, encoding="utf-8"))
