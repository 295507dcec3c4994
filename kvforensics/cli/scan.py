"""`kvforensics scan`: many nodes' logs, the whole-log findings per node, and the totals."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from kvforensics.cli._app import app
from kvforensics.cli._common import console, print_json, split_policies
from kvforensics.cli._inputs import (
    Align,
    Chunk,
    Formats,
    LogOptions,
    NoProgress,
    PageSize,
    Pool,
    Rank,
    Since,
    TransferSeconds,
    Until,
    check_format,
)


@app.command()
def scan(
    paths: Annotated[
        list[str], typer.Argument(help="Log files, directories (recursive), globs or fsspec URLs.")
    ],
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="Nodes table as Parquet (gap admissions beside it)."),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="table | json")] = "table",
    engine: Annotated[str, typer.Option(help="local (process pool) | ray")] = "local",
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address; default: start a local Ray.")
    ] = None,
    jobs: Annotated[int | None, typer.Option(help="Local workers; default: one per core.")] = None,
    group_by: Annotated[
        str, typer.Option(help="dir: a node per directory (its PP ranks) | file")
    ] = "dir",
    report: Annotated[
        Path | None, typer.Option(help="Write a markdown summary and figures here.")
    ] = None,
    policy: Annotated[str, typer.Option(help="Policies run forward besides prefix.")] = "fixed",
    transfer_seconds: TransferSeconds = None,
    page_size: PageSize = None,
    align: Align = None,
    chunk_size: Chunk = None,
    pool_size: Pool = None,
    rank: Rank = None,
    formats: Formats = None,
    since: Since = None,
    until: Until = None,
    no_progress: NoProgress = False,
) -> None:
    """Scan a fleet's logs: out-of-memory causes, gap admissions, margins, what fixes refuse.

    Exit codes: 0 at least one node was scanned (its findings are in the output); 2 bad
    input, or no node could be replayed."""
    from kvforensics.scan import ScanOptions, scan
    from kvforensics.scan.outputs import check_outputs, write_outputs
    from kvforensics.scan.terminal import print_fleet

    check_format(fmt, ("table", "json"))
    given = LogOptions(
        page_size, align, chunk_size, pool_size, rank, formats, transfer_seconds, since, until,
        no_progress,
    )  # fmt: skip
    opts = ScanOptions(
        policies=tuple(split_policies(policy)),
        overrides=tuple(given.overrides().items()),
        transfer_seconds=transfer_seconds,
        rank=rank,
        formats=tuple(str(f) for f in formats or ()),
        since=since, until=until,
    )  # fmt: skip
    given.narrow()  # a bad value is a one-line error before any node is read
    check_outputs(output, report, paths)
    nodes = []  # the stage, once the nodes are known
    with given.stages() as st:
        fleet = scan(
            paths, opts, group_by=group_by, engine=engine, jobs=jobs, address=address,
            on_start=lambda n: nodes.append(st.stage("scanning nodes", n, "nodes")),
            on_done=lambda _n: nodes[0].advance(),
        )  # fmt: skip
    # findings are data (exit 0); a scan that could replay no node at all is bad input,
    # and a failed run writes nothing
    failed = not fleet.summary().scanned
    written = write_outputs(fleet, output, report, paths)
    if fmt == "json":
        print_json(fleet.as_dict())
    else:
        print_fleet(fleet, console)
        for path in written:
            console.print(f"wrote {path}", markup=False)
    if failed:
        if output or report:
            typer.echo("error: no node could be replayed; nothing written", err=True)
        sys.exit(2)
