"""A report directory's manifest: the files a report wrote there, so that writing a new
report over it (``--force``) replaces exactly those and never anything else."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from kvforensics.errors import InputError
from kvforensics.outputs import atomic_write_text

MANIFEST = "kvforensics-report.json"


def read_manifest(out: Path) -> set[str] | None:
    """The file names an earlier report listed, or None when there is no (usable) manifest.
    Only plain names in the directory itself are believed: a manifest cannot point
    elsewhere."""
    path = out / MANIFEST
    if not path.is_file() or path.is_symlink():
        return None
    try:
        files = json.loads(path.read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(files, list):
        return None
    return {f for f in files if isinstance(f, str) and f not in (".", "..") and Path(f).name == f}


def claim(out: Path, names: Iterable[str], force: bool) -> list[Path]:
    """Check that a report may write ``names`` into ``out``; returns the earlier report's
    files that this one does not rewrite (to remove once it is written).

    An empty or new directory is always fine. A non-empty one needs ``force``, and then
    only an earlier report's files (by its manifest) may be replaced."""
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: exists and is not a directory")
    if not out.exists() or not any(out.iterdir()):
        return []
    earlier = read_manifest(out)
    if not force:
        what = "an earlier report" if earlier is not None else "files no report wrote"
        raise InputError(
            f"{out} is not empty (it holds {what}): give a new directory, or --force to "
            "replace an earlier report's files there (nothing else is touched)"
        )
    earlier = earlier or set()
    names = [*names, MANIFEST]
    clash = sorted(n for n in names if (out / n).exists() and n not in earlier)
    if clash:
        raise InputError(
            f"{out / clash[0]} was not written by a report: --force replaces only an earlier "
            "report's files; move it or choose another directory"
        )
    return [out / n for n in sorted(earlier - set(names)) if (out / n).is_file()]


def record(out: Path, names: Iterable[str], stale: Iterable[Path]) -> Path:
    """Write the manifest of this report, then remove the earlier report's leftovers."""
    from kvforensics import __version__

    path = out / MANIFEST
    body = {"written_by": f"kvforensics {__version__} report", "files": sorted(names)}
    atomic_write_text(path, json.dumps(body, indent=2) + "\n")
    for p in stale:
        p.unlink(missing_ok=True)
    return path
