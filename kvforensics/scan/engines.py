"""Where the per-node tasks run: a local process pool, or Ray tasks on a cluster.

Both run ``task.scan_node`` on the same records and return results in node order, so
their tables are the same.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool

from kvforensics.errors import InputError
from kvforensics.progress import current
from kvforensics.scan.records import NodeScan, NodeSpec
from kvforensics.scan.task import ScanOptions, scan_node

ENGINES = ("local", "ray")
Progress = Callable[[NodeScan], None]


def run_tasks(
    specs: Sequence[NodeSpec],
    opts: ScanOptions,
    *,
    engine: str = "local",
    jobs: int | None = None,
    address: str | None = None,
    on_done: Progress | None = None,
) -> list[NodeScan]:
    if engine == "local":
        return run_local(specs, opts, jobs=jobs, on_done=on_done)
    if engine == "ray":
        return run_ray(specs, opts, address=address, on_done=on_done)
    raise InputError(f"--engine {engine}: choose from {', '.join(ENGINES)}")


def run_local(
    specs: Sequence[NodeSpec], opts: ScanOptions, *, jobs: int | None = None,
    on_done: Progress | None = None,
) -> list[NodeScan]:
    """One worker per core by default; one job runs in this process (no pool). The
    temporary directory URLs are fetched into is this process's, so it goes when the
    scan ends even if a worker was killed mid-node; such a node is scanned again alone,
    and if its worker dies again its row says so."""
    if jobs is None:
        jobs = os.cpu_count() or 1
    if jobs < 1:
        raise InputError(f"--jobs {jobs}: give at least 1")
    done = on_done or (lambda _r: None)
    with tempfile.TemporaryDirectory(prefix="kvf-scan-") as work:
        if jobs == 1 or len(specs) <= 1:
            out = []
            # one node: its one log, when large, over byte ranges on the workers
            ranges = jobs if len(specs) == 1 else 1
            for spec in specs:
                with current().scope():  # this node's stages, gone when it is done
                    out.append(scan_node(spec, opts, work, jobs=ranges))
                done(out[-1])
            return out
        results = _pool(specs, range(len(specs)), opts, min(jobs, len(specs)), work, done)
        for i in [i for i, r in enumerate(results) if r is None]:
            again = _pool(specs, [i], opts, 1, work, done)[i]
            if again is None:
                again = _died(specs[i])
                done(again)
            results[i] = again
    return results  # type: ignore[return-value]


def _pool(
    specs: Sequence[NodeSpec], which: Iterable[int], opts: ScanOptions, workers: int, work: str,
    done: Progress,
) -> list[NodeScan | None]:
    """The nodes ``which`` on a pool of ``workers`` processes; None where a worker died."""
    # spawn, not fork: polars' thread pool does not survive a fork
    ctx = multiprocessing.get_context("spawn")
    results: list[NodeScan | None] = [None] * len(specs)
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {pool.submit(scan_node, specs[i], opts, work): i for i in which}
        for fut in as_completed(futures):
            try:
                got = fut.result()
            except BrokenProcessPool:  # a worker was killed: which node it held is unknown
                continue
            results[futures[fut]] = got
            done(got)
    return results


def _died(spec: NodeSpec) -> NodeScan:
    return NodeScan(
        spec.node,
        spec.files,
        "the worker process scanning this node died (killed, perhaps for memory), twice",
    )


def run_ray(
    specs: Sequence[NodeSpec], opts: ScanOptions, *, address: str | None = None,
    on_done: Progress | None = None,
) -> list[NodeScan]:
    """Each node a Ray task; ``address`` joins a running cluster, none starts a local one."""
    try:
        import ray
    except ImportError:
        raise InputError("--engine ray needs Ray: pip install 'kvforensics[fleet]'") from None
    started = not ray.is_initialized()
    if started:
        try:
            # (Ray takes a level's name too; its annotation says int)
            ray.init(address=address, include_dashboard=False, logging_level="ERROR")  # type: ignore[arg-type]
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = address or "a local Ray"
            raise InputError(f"cannot start or join {where}: {str(exc).splitlines()[0]}") from None
    try:
        task = ray.remote(scan_node)
        refs = [task.remote(spec, opts) for spec in specs]
        index = {ref: i for i, ref in enumerate(refs)}
        results: list[NodeScan | None] = [None] * len(specs)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                got: NodeScan = ray.get(ref)
                results[index[ref]] = got
                if on_done:
                    on_done(got)
        return results  # type: ignore[return-value]
    finally:
        if started:
            ray.shutdown()
