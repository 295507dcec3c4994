"""The per-node task: the same rebuild, fidelity check and causes as ``replay``, then the
whole-log findings. A plain function of picklable records, so a process pool and Ray run
the same code and return the same ``NodeScan``."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kvforensics.causes.oom import OomFigures
from kvforensics.errors import KvfError
from kvforensics.logs.source import check_readable
from kvforensics.model import POLICIES
from kvforensics.replay.replay import ReplayResult
from kvforensics.replay.stock import StockAnalysis
from kvforensics.replay.whole_log import FIXES, whole_log
from kvforensics.rounds.stream import Narrow
from kvforensics.scan.discover import is_url
from kvforensics.scan.records import HeldCause, NodeOom, NodeScan, NodeSpec


@dataclass(frozen=True, slots=True)
class ScanOptions:
    """What ``replay`` takes besides the logs, the same for every node."""

    policies: tuple[str, ...] = ("fixed",)
    overrides: tuple[tuple[str, int | None], ...] = ()
    transfer_seconds: float | None = None
    rank: str | None = None
    formats: tuple[str, ...] = ()
    #: ``--since`` / ``--until`` as given (``rounds.stream.Narrow``)
    since: str | None = None
    until: str | None = None


def scan_node(
    spec: NodeSpec, opts: ScanOptions, workdir: str | None = None, jobs: int = 1
) -> NodeScan:
    """Never raises for bad input: the node's result says what went wrong in a line.
    ``jobs``: workers for a node whose one plain log is large (``replay.ranges``: the
    same result); the scan's own pool runs one node per worker with 1.

    A URL is copied into a temporary directory first: under ``workdir`` when given (a
    local pool's parent owns it, so what a killed worker leaves there goes with it),
    else one of its own (a Ray task on another machine)."""
    if not any(is_url(f) for f in spec.files):
        return _scan_fetched(spec, opts, None, jobs)
    with tempfile.TemporaryDirectory(prefix="kvf-scan-", dir=workdir) as tmp:
        return _scan_fetched(spec, opts, Path(tmp), jobs)


def _scan_fetched(spec: NodeSpec, opts: ScanOptions, tmp: Path | None, jobs: int = 1) -> NodeScan:
    local, unreadable = _fetch(spec.files, tmp)
    if not local:
        return NodeScan(spec.node, spec.files, "no readable file", tuple(unreadable))
    try:
        return _scan(spec, opts, local, tuple(unreadable), _node_jobs(local, jobs))
    except KvfError as exc:
        return NodeScan(spec.node, spec.files, str(exc), tuple(unreadable))
    except Exception as exc:  # one broken node must not stop the fleet
        text = f"internal error: {type(exc).__name__}: {exc}".splitlines()[0]
        return NodeScan(spec.node, spec.files, text, tuple(unreadable))


def _fetch(
    files: tuple[str, ...], tmp: Path | None
) -> tuple[list[Path], list[tuple[str, str]]]:
    """Local paths for the node's files (a URL is copied into ``tmp`` under its own name),
    and the files that cannot be read with the reason."""
    local, bad = [], []
    for i, f in enumerate(files):
        try:
            if is_url(f):
                assert tmp is not None  # a node with URLs is given a folder to copy into
                local.append(_copy(f, tmp / str(i)))
            else:
                check_readable(Path(f))
                local.append(Path(f))
        except KvfError as exc:
            bad.append((f, str(exc).removeprefix(f"{f}: ")))
        except OSError as exc:
            bad.append((f, f"cannot read: {exc.strerror or exc}"))
    return local, bad


def _copy(url: str, folder: Path) -> Path:
    import fsspec

    folder.mkdir(parents=True)
    dest = folder / url.rsplit("/", 1)[-1]
    with fsspec.open(url, "rb") as src, dest.open("wb") as out:
        shutil.copyfileobj(src, out, 4 << 20)
    return dest


def _node_jobs(local: list[Path], jobs: int) -> int:
    """``jobs`` for a node of one log of ``checks.REMOTE_BYTES`` or more, else 1 (a small
    log costs less in one process than the workers take to start)."""
    from kvforensics.replay.checks import REMOTE_BYTES

    if jobs < 2 or len(local) != 1:
        return 1
    try:
        return jobs if local[0].stat().st_size >= REMOTE_BYTES else 1
    except OSError:
        return 1


def _scan(
    spec: NodeSpec,
    opts: ScanOptions,
    local: list[Path],
    unreadable: tuple[tuple[str, str], ...],
    jobs: int = 1,
) -> NodeScan:
    from kvforensics.replay import ReplayOptions, replay_logs
    from kvforensics.replay.stock import NoAdderLines

    # the fixes whose refusals are counted run forward too: their delays at the start
    # round then come from the replay's own runs, with its transfer model
    policies = list(dict.fromkeys([*opts.policies, *(p for p in FIXES if p in POLICIES)]))
    options = ReplayOptions(
        policies,
        overrides=dict(opts.overrides),
        transfer_seconds=opts.transfer_seconds,
        rank=opts.rank,
        formats=[Path(f) for f in opts.formats] or None,
        stream=True,
        whole_log=True,
        narrow=Narrow.parse(opts.since, opts.until),
        jobs=jobs,  # 1 unless the scan is of one large log (``scan_node``)
    )
    try:
        rr = replay_logs(local, options)
    except NoAdderLines as no:
        if not no.release:
            raise
        return _stock(spec, no.stock(), unreadable)
    rb = rr.rebuild
    return NodeScan(
        node=spec.node,
        files=spec.files,
        unreadable=unreadable,
        bytes_read=sum(f.bytes_on_disk for f in rr.summary.files),
        rounds=rr.rounds_seen,
        logged_rounds=rr.logged_seen,
        ooms=_ooms(rr),
        whole_log=whole_log(rr),
        fidelity_rounds=rr.fidelity.rounds_checked,
        mismatches=len(rr.fidelity.mismatches),
        contradictions=len(rb.contradictions),
        exit_code=rr.exit_code(),
        notes=tuple(rr.summary.notes()),
    )


def _stock(
    spec: NodeSpec, a: StockAnalysis, unreadable: tuple[tuple[str, str], ...]
) -> NodeScan:
    """A release's log (no adder lines): its out-of-memory events and their pool
    arithmetic; no round can be re-run, so there are no whole-log findings."""
    ooms = tuple(
        NodeOom(
            figures=OomFigures(
                round=None, rid=None, tokens=o.tokens, available=o.full.available
            ),
            reproduced=None,
            causes=(HeldCause(str(o.arithmetic.mechanism), o.arithmetic.reason, None),),
            where=o.where,
            from_release=True,
        )
        for o in a.ooms
    )
    return NodeScan(
        node=spec.node,
        files=spec.files,
        unreadable=unreadable,
        bytes_read=sum(f.bytes_on_disk for f in a.summary.files),
        ooms=ooms,
        contradictions=len(a.contradictions),
        exit_code=a.exit_code(),
        notes=(
            f"a {a.node.kind} node's release log (no adder lines): out-of-memory events and "
            "their pool arithmetic only; gap admissions and margins need the adder lines",
            *a.summary.notes(),
        ),
    )


def _ooms(rr: ReplayResult) -> tuple[NodeOom, ...]:
    o = rr.observed_oom
    if not o:
        return ()
    return (
        NodeOom(
            figures=o,
            reproduced=rr.reproduced,
            causes=held_causes(rr),
        ),
    )


def held_causes(rr: ReplayResult) -> tuple[HeldCause, ...]:
    """The cause catalogue's held findings."""
    return tuple(HeldCause(c.id, c.summary, c.round) for c in rr.causes if c.held)
