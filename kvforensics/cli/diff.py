"""`kvforensics diff`: two ledgers side by side, first divergence highlighted."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvforensics.cli import app
from kvforensics.cli._common import console, print_json, print_log_notes
from kvforensics.cli._inputs import (
    Align,
    Chunk,
    Formats,
    LogOptions,
    PageSize,
    Pool,
    ProfileName,
    Rank,
    TransferSeconds,
    check_format,
)
from kvforensics.errors import InputError
from kvforensics.report.diff import diff_ledgers
from kvforensics.report.inputs import are_logs, diff_inputs, replay_inputs


@app.command()
def diff(
    inputs: Annotated[
        list[Path],
        typer.Argument(help="A scenario TOML, one or two ledger files, or log files to replay."),
    ],
    policy: Annotated[
        str | None,
        typer.Option(
            help="Two policies (scenario: default prefix,fixed); selects from ledger files."
        ),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="table | json | markdown")] = "table",
    transfer_seconds: TransferSeconds = None,
    page_size: PageSize = None,
    align: Align = None,
    chunk_size: Chunk = None,
    pool_size: Pool = None,
    rank: Rank = None,
    formats: Formats = None,
    profile: ProfileName = None,
) -> None:
    """Compare two ledgers round by round and show where they first diverge."""
    check_format(fmt, ("table", "json", "markdown"))
    opts = LogOptions(
        page_size, align, chunk_size, pool_size, rank, formats, transfer_seconds,
        profile=profile,
    )  # fmt: skip
    names = [p.strip() for p in policy.split(",") if p.strip()] if policy else None
    if are_logs(inputs):
        names = names or ["prefix", "fixed"]
        if len(names) != 2:
            raise InputError(f"diff compares two policies; got {len(names)}")
        rr, results = replay_inputs(inputs, names, **opts.replay_kwargs())
        print_log_notes(rr.summary)
        (ln, lf), (rn, rf) = ((n, results[n].ledger_frame()) for n in names)
    else:
        (ln, lf), (rn, rf) = diff_inputs(inputs, names)
    d = diff_ledgers(lf, rf, ln, rn)
    if fmt == "json":
        print_json(d.as_dict())
    elif fmt == "markdown":
        print(d.to_markdown(), end="")
    else:
        console.print(d.rich())
