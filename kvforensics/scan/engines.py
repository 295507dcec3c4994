"""Where the per-node tasks run: a local process pool, or Ray tasks on a cluster.

Both run ``task.scan_node`` on the same records and return results in node order, so
their tables are the same.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed

from kvforensics.errors import InputError
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
    specs: Sequence[NodeSpec], opts: ScanOptions, *, jobs: int | None = None, on_done=None
) -> list[NodeScan]:
    """One worker per core by default; one job runs in this process (no pool)."""
    if jobs is None:
        jobs = os.cpu_count() or 1
    if jobs < 1:
        raise InputError(f"--jobs {jobs}: give at least 1")
    if jobs == 1 or len(specs) <= 1:
        out = []
        for spec in specs:
            out.append(scan_node(spec, opts))
            if on_done:
                on_done(out[-1])
        return out
    # spawn, not fork: polars' thread pool does not survive a fork
    ctx = multiprocessing.get_context("spawn")
    results: list[NodeScan | None] = [None] * len(specs)
    with ProcessPoolExecutor(max_workers=min(jobs, len(specs)), mp_context=ctx) as pool:
        futures = {pool.submit(scan_node, spec, opts): i for i, spec in enumerate(specs)}
        for fut in as_completed(futures):
            results[futures[fut]] = fut.result()
            if on_done:
                on_done(results[futures[fut]])
    return results  # type: ignore[return-value]


def run_ray(
    specs: Sequence[NodeSpec], opts: ScanOptions, *, address: str | None = None, on_done=None
) -> list[NodeScan]:
    """Each node a Ray task; ``address`` joins a running cluster, none starts a local one."""
    try:
        import ray
    except ImportError:
        raise InputError("--engine ray needs Ray: pip install 'kvforensics[fleet]'") from None
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(address=address, include_dashboard=False, logging_level="ERROR")
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
                results[index[ref]] = ray.get(ref)
                if on_done:
                    on_done(results[index[ref]])
        return results  # type: ignore[return-value]
    finally:
        if started:
            ray.shutdown()
