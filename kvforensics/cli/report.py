"""`kvforensics report`: write the postmortem attachment for a scenario."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvforensics.cli import app
from kvforensics.cli._common import console
from kvforensics.report.inputs import run_scenario
from kvforensics.report.report import write_report


@app.command()
def report(
    scenario: Annotated[Path, typer.Argument(help="Scenario TOML file.")],
    out: Annotated[Path, typer.Option("-o", "--out", help="Directory to write into.")],
    policies: Annotated[
        str, typer.Option(help="Comma-separated policies.")
    ] = "prefix,fixed,upstream,drain",
    round_no: Annotated[
        int | None, typer.Option("--round", help="Round to explain (default: where policies part).")
    ] = None,
    title: Annotated[str | None, typer.Option(help="Report title.")] = None,
) -> None:
    """Write report.md, figures and ledgers (Parquet and CSV) for a scenario under each policy."""
    names = [p.strip() for p in policies.split(",") if p.strip()]
    results = run_scenario(scenario, names)
    paths = write_report(
        out,
        results,
        title=title or f"{scenario.stem}: prefill admission under {', '.join(names)}",
        focus_round=round_no,
        inputs=[scenario],
    )
    for p in paths:
        console.print(str(p), highlight=False)
