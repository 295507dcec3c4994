"""`kvforensics diff`: two ledgers side by side, first divergence highlighted."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import polars as pl
import typer

from kvforensics.cli._app import app
from kvforensics.cli._common import console, print_json, print_notes
from kvforensics.cli._inputs import (
    Align,
    Chunk,
    Formats,
    LogOptions,
    NoProgress,
    PageSize,
    Pool,
    ProfileName,
    Rank,
    Since,
    TransferSeconds,
    Until,
    check_format,
)
from kvforensics.errors import InputError
from kvforensics.model.policies import AS_RAN, FIX
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
    since: Since = None,
    until: Until = None,
    profile: ProfileName = None,
    no_progress: NoProgress = False,
) -> None:
    """Compare two ledgers round by round and show where they first diverge."""
    check_format(fmt, ("table", "json", "markdown"))
    opts = LogOptions(
        page_size, align, chunk_size, pool_size, rank, formats, transfer_seconds, since, until,
        no_progress, profile=profile,
    )  # fmt: skip
    names = [p.strip() for p in policy.split(",") if p.strip()] if policy else None
    with opts.stages():
        (ln, lf), (rn, rf), notes = _sides(inputs, names, opts)
    print_notes(notes)
    d = diff_ledgers(lf, rf, ln, rn)
    if fmt == "json":
        print_json(d.as_dict())
    elif fmt == "markdown":
        print(d.to_markdown(), end="")
    else:
        console.print(d.rich())


def _sides(
    inputs: list[Path], names: list[str] | None, opts: LogOptions
) -> tuple[tuple[str, pl.DataFrame], tuple[str, pl.DataFrame], list[str]]:
    """The two ledgers, from logs (replayed under the two policies) or as ``diff_inputs``
    reads them, and what the log reader could not read."""
    if not are_logs(inputs):
        return *diff_inputs(inputs, names), []
    names = names or [AS_RAN, FIX]
    if len(names) != 2:
        raise InputError(f"diff compares two policies; got {len(names)}")
    rr, results = replay_inputs(inputs, names, opts.replay_options())
    left, right = ((n, results[n].ledger_frame()) for n in names)
    return left, right, rr.summary.notes()
