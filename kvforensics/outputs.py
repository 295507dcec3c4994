"""Writing results: checked before any work, always atomic, never over an input file,
and nothing left behind by a run that fails."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from kvforensics.clip import clip
from kvforensics.errors import InputError

#: bytes in one path component on the filesystems we write to
NAME_MAX = 255
#: what the staging directory's name adds around the output's name
_STAGING_EXTRA = 24


def check_not_input(out: Path, inputs: Iterable[Path]) -> None:
    """Refuse to write an output over one of the inputs."""
    target = _resolved(Path(out))
    for p in inputs:
        if _resolved(Path(p)) == target:
            raise InputError(f"refusing to write {out}: it is one of the input files")


def _resolved(path: Path) -> Path:
    """``path`` with its links followed; a link loop (``a -> b -> a``) is the user's to
    fix (Python raises RuntimeError for it before 3.13, OSError after)."""
    try:
        return path.resolve()
    except (RuntimeError, OSError):
        raise InputError(f"{clip(str(path), 200)}: a symlink loop; give the file itself") from None


def check_output(out: Path, inputs: Iterable[Path] = (), *, directory: bool = False) -> None:
    """Fail now, before any work, if ``out`` cannot be written; creates nothing.

    ``directory``: ``out`` is a directory to write into (made when the results are)."""
    out = Path(out)
    check_not_input(out, inputs)
    if len(out.name.encode()) > NAME_MAX - _STAGING_EXTRA:
        raise InputError(
            f"{clip(str(out), 80)}: file name longer than {NAME_MAX - _STAGING_EXTRA} bytes; "
            "give a shorter name"
        )
    if out.is_dir() and not directory:
        raise InputError(f"{out}: is a directory; give a file name")
    if out.exists() and directory and not out.is_dir():
        raise InputError(f"{out}: exists and is not a directory; give a directory")
    _probe(_nearest_existing(out if directory else out.parent), out)


def _nearest_existing(path: Path) -> Path:
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _probe(parent: Path, out: Path) -> None:
    """A file can be made in ``parent`` (pseudo-filesystems such as /proc pass access()
    checks but refuse new files, so try one and remove it at once)."""
    if not parent.is_dir():
        raise InputError(f"{out}: {parent} is not a directory")
    try:
        fd, name = tempfile.mkstemp(prefix=".kvforensics-probe.", dir=parent)
    except OSError as exc:
        raise InputError(
            f"{out}: cannot create files in {parent} ({exc.strerror}); choose another path"
        ) from None
    os.close(fd)
    os.unlink(name)


def _make_parents(path: Path) -> list[Path]:
    """mkdir -p, returning the directories it made (deepest last)."""
    made: list[Path] = []
    missing = []
    p = Path(os.path.abspath(path))
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir()
        made.append(d)
    return made


def _remove_tree(path: Path) -> None:
    """Remove a staging directory even while a writer thread that outlived its caller
    (polars' sinks) may still be creating its file: retry until it is gone."""
    for _ in range(50):
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return
        time.sleep(0.02)


def atomic_write(out: Path, write: Callable[[Path], object]) -> None:
    """Call ``write(tmp)`` on a file in a private staging directory next to ``out``, then
    rename it into place (atomic: same filesystem).

    A failure leaves ``out`` untouched (or absent), no temporary file, and none of the
    parent directories this call made; an OS error becomes a one-line InputError."""
    out = Path(out)
    made: list[Path] = []
    staging: Path | None = None
    ok = False
    try:
        made = _make_parents(out.parent)
        staging = Path(
            tempfile.mkdtemp(prefix=f".{out.name[:120]}.", suffix=".tmp", dir=out.parent)
        )
        tmp = staging / out.name
        write(tmp)
        # mkstemp makes files private; an output is an ordinary file.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, out)
        ok = True
    except OSError as exc:
        raise InputError(f"{out}: cannot write ({exc.strerror or exc})") from None
    finally:
        if staging is not None:
            _remove_tree(staging)
        if not ok:
            for d in reversed(made):
                with contextlib.suppress(OSError):
                    d.rmdir()


def atomic_write_text(out: Path, text: str) -> None:
    atomic_write(out, lambda p: p.write_text(text, encoding="utf-8"))
