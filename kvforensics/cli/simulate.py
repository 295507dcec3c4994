"""`kvforensics simulate`: run a scenario through the admission model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from rich.table import Table

from kvforensics.cli._app import app
from kvforensics.cli._common import console, print_json, split_policies, stages
from kvforensics.cli._inputs import NoProgress, check_format
from kvforensics.ledger_io import ledger_format, write_frame
from kvforensics.model import PrefillNode, RunResult
from kvforensics.outputs import check_output
from kvforensics.progress import AnyStage
from kvforensics.report.terminal import literal
from kvforensics.scenario import load_scenario


@app.command()
def simulate(
    scenario: Annotated[Path, typer.Argument(help="Scenario TOML file.")],
    policy: Annotated[str, typer.Option(help="Comma-separated policies.")] = "prefix,fixed",
    rounds: Annotated[int | None, typer.Option(help="Stop after this many rounds.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table | json")] = "table",
    show: Annotated[
        int, typer.Option(help="Table: the last N rounds of each policy (0: all).")
    ] = 40,
    ledger: Annotated[
        Path | None, typer.Option(help="Also write the ledgers (.parquet/.csv/.json/.ndjson).")
    ] = None,
    no_progress: NoProgress = False,
) -> None:
    """Re-run a scenario's rounds under each policy and show decisions, pieces and any OOM."""
    check_format(fmt, ("table", "json"))
    if ledger is not None:
        check_output(ledger, [scenario])
        ledger_format(ledger)
    sc = load_scenario(scenario)
    results: list[RunResult] = []
    with stages(not no_progress) as st:
        for p in split_policies(policy):
            node = sc.build_node(p)
            total = node.pending()
            left = st.stage(f"policy {p}", total, "requests")
            results.append(
                node.run(rounds, on_round=_counting(left, total))
            )
            left.done()
    if ledger is not None:
        write_frame(pl.concat([r.ledger_frame() for r in results]), ledger)
    if fmt == "json":
        print_json([r.as_dict() for r in results])
        return
    for r in results:
        table = Table(title=f"{sc.name} under [bold]{r.policy}[/]", show_lines=False)
        for col in ("round", "time s", "pieces [start, end)", "decisions", "B after"):
            table.add_column(
                col, justify="right" if col in ("round", "time s", "B after") else "left"
            )
        shown = r.rounds if show == 0 or len(r.rounds) <= show else r.rounds[-show:]
        if len(shown) < len(r.rounds):
            table.caption = (
                f"last {len(shown)} of {len(r.rounds)} rounds; "
                "--show 0 for all, --format json or --ledger for everything"
            )
        for rec in shown:
            pieces = ", ".join(f"{literal(x)} [{s}, {e})" for x, s, e in rec.pieces) or "-"
            dec = ", ".join(
                f"{literal(x)}: {d}/{b}" for c, x, d, b in rec.decisions if c == "add_one_req"
            )
            if rec.skipped_waiting:
                dec = (dec + " " if dec else "") + "(waiting queue skipped)"
            table.add_row(
                str(rec.round), f"{rec.time:.2f}", pieces, dec or "-", str(rec.baseline_end)
            )
        console.print(table)
        if r.oom:
            console.print(
                f"[bold red]out of memory[/] in round {r.oom.round} for {literal(r.oom.rid)}: "
                f"tried to allocate {r.oom.tokens} tokens, {r.oom.available} available"
            )
        else:
            console.print(f"[green]no out of memory[/] under {r.policy}")


def _counting(stage: AnyStage, total: int) -> Callable[[PrefillNode], None]:
    """After each round of a run: how many of its ``total`` requests are done."""
    return lambda n: stage.to(total - n.pending())
