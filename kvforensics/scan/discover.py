"""Paths -> log files -> nodes. A path is a file, a directory (searched recursively), a
glob, or an fsspec URL (``s3://bucket/logs/``) when fsspec and the backend are installed.

Grouping by directory puts one node's PP ranks together (the layout a log collector
writes: one directory per node); ``file`` makes every file its own node.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kvforensics.scan.records import NodeSpec

GLOB_CHARS = frozenset("*?[")
#: in a directory, the files taken as logs (a file named on the command line always is)
LOG_SUFFIXES = (".gz", ".txt")
GROUPS = ("dir", "file")


@dataclass(frozen=True, slots=True)
class Discovery:
    nodes: tuple[NodeSpec, ...]
    #: (path, reason): what could not be listed or read at all
    problems: tuple[tuple[str, str], ...]


def is_url(path: str) -> bool:
    return "://" in path


def looks_like_log(name: str) -> bool:
    """``pp0.log``, ``pp1.log.gz``, ``scheduler.log.3``, ``node.txt``: not READMEs or data."""
    return not name.startswith(".") and (".log" in name or name.endswith(LOG_SUFFIXES))


def discover(paths: Iterable[str], group_by: str = "dir") -> Discovery:
    if group_by not in GROUPS:
        from kvforensics.errors import InputError

        raise InputError(f"--group-by {group_by}: choose from {', '.join(GROUPS)}")
    files: list[str] = []
    problems: list[tuple[str, str]] = []
    for raw in paths:
        found, problem = (_remote if is_url(str(raw)) else _local)(str(raw))
        files.extend(found)
        if problem:
            problems.append((str(raw), problem))
    groups: dict[str, list[str]] = {}
    for f in dict.fromkeys(files):  # a file named twice is read once
        groups.setdefault(_parent(f) if group_by == "dir" else f, []).append(f)
    nodes = tuple(NodeSpec(node, tuple(fs)) for node, fs in sorted(groups.items()))
    return Discovery(nodes, tuple(problems))


def _parent(f: str) -> str:
    if is_url(f):
        return f.rsplit("/", 1)[0]
    return str(Path(f).parent)


def _local(raw: str) -> tuple[list[str], str | None]:
    if GLOB_CHARS & set(raw):
        hits = sorted(glob.glob(raw, recursive=True))
        if not hits:
            return [], "no file matches this pattern"
        out = []
        for h in hits:
            out.extend(_local_dir(Path(h)) if Path(h).is_dir() else [h])
        return out, None
    p = Path(raw)
    if p.is_dir():
        found = _local_dir(p)
        return found, None if found else "no log files in this directory"
    if not p.exists():
        return [], "no such file or directory"
    return [raw], None


def _local_dir(d: Path) -> list[str]:
    return sorted(
        str(p)
        for p in d.rglob("*")
        if p.is_file()
        and looks_like_log(p.name)
        and not any(part.startswith(".") for part in p.relative_to(d).parts)
    )


def _remote(url: str) -> tuple[list[str], str | None]:
    try:
        import fsspec
    except ImportError:
        return [], "an fsspec URL needs fsspec: pip install 'kvforensics[fleet]'"
    try:
        fs, path = fsspec.core.url_to_fs(url)
        if GLOB_CHARS & set(path):
            hits = [h for h in fs.glob(path) if fs.isfile(h)]
        elif fs.isdir(path):
            hits = [h for h in fs.find(path) if looks_like_log(h.rsplit("/", 1)[-1])]
        elif fs.exists(path):
            hits = [path]
        else:
            return [], "no such file or directory"
    except (ImportError, ValueError) as exc:  # unknown protocol, backend not installed
        return [], f"cannot open this URL: {str(exc).splitlines()[0]}"
    except OSError as exc:
        return [], f"cannot list: {exc.strerror or exc}"
    if not hits:
        return [], "no log files here"
    return sorted(fs.unstrip_protocol(h) for h in hits), None


def short_names(nodes: list[str]) -> tuple[str, dict[str, str]]:
    """The nodes' common directory and each node's name below it (URLs stay whole)."""
    if not nodes or any(is_url(n) for n in nodes):
        return "", {n: n for n in nodes}
    full = {n: os.path.abspath(n) for n in nodes}
    base = os.path.commonpath(list(full.values()))
    if len(nodes) == 1:
        base = os.path.dirname(base)
    return base, {n: os.path.relpath(f, base) for n, f in full.items()}
