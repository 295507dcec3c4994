"""`kvforensics explain`: one round (or every round of one request) told step by step."""

from __future__ import annotations

from collections.abc import Mapping
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
from kvforensics.model import RunResult
from kvforensics.model.policies import AS_RAN, FIX
from kvforensics.report.explain import explain_rid, explain_round
from kvforensics.report.inputs import (
    are_logs,
    is_scenario,
    ledgers_from_file,
    replay_inputs,
    run_scenario,
)


@app.command()
def explain(
    sources: Annotated[
        list[Path], typer.Argument(help="A scenario TOML, a ledger file, or log files to replay.")
    ],
    round_no: Annotated[int | None, typer.Option("--round", help="The round to tell.")] = None,
    rid: Annotated[str | None, typer.Option(help="Tell every round touching this request.")] = None,
    policy: Annotated[
        str | None, typer.Option(help="Comma-separated policies (scenario default: prefix,fixed).")
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
    """Tell a round step by step under each policy: what each request asked, the books, the decision."""
    if (round_no is None) == (rid is None):
        raise InputError("give exactly one of --round or --rid")
    check_format(fmt, ("table", "json", "markdown"))
    opts = LogOptions(
        page_size, align, chunk_size, pool_size, rank, formats, transfer_seconds, since, until,
        no_progress, profile=profile,
    )  # fmt: skip
    names = [p.strip() for p in policy.split(",") if p.strip()] if policy else None
    with opts.stages():
        results, notes = _results(sources, names, opts)
    print_notes(notes)
    if round_no is not None:
        exps = [explain_round(results, round_no)]
    else:
        assert rid is not None  # exactly one of the two is given (checked above)
        exps = explain_rid(results, rid)
    if fmt == "json":
        print_json([e.as_dict() for e in exps])
    elif fmt == "markdown":
        print("\n".join(e.to_markdown() for e in exps), end="")
    else:
        for e in exps:
            console.print(e.rich())


def _results(
    sources: list[Path], names: list[str] | None, opts: LogOptions
) -> tuple[Mapping[str, RunResult | pl.DataFrame], list[str]]:
    """Each policy's run from logs (replayed), a scenario (run) or a ledger file, and
    what the log reader could not read."""
    if are_logs(sources):
        rr, results = replay_inputs(sources, names, opts.replay_options())
        return results, rr.summary.notes()
    if len(sources) != 1:
        raise InputError("explain takes one scenario or ledger file, or log files")
    if is_scenario(sources[0]):
        return run_scenario(sources[0], names or [AS_RAN, FIX]), []
    return ledgers_from_file(sources[0], names), []
