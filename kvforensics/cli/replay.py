"""`kvforensics replay`: the command to run after a crash.

Exit codes: 0 the replay agrees with the log; 2 bad input; 3 the model disagrees with a
logged number or the evidence contradicts itself (listed); 4 the logged out-of-memory was
not reproduced under `prefix`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from kvforensics.cli import app
from kvforensics.cli._common import console, print_json, print_log_summary, split_policies
from kvforensics.cli.rounds import Align, Chunk, Formats, PageSize, Pool, overrides
from kvforensics.replay import replay_logs, verdict_text
from kvforensics.replay.stock import StockAnalysis
from kvforensics.replay.stock_words import stock_text


@app.command()
def replay(
    logs: Annotated[list[Path], typer.Argument(help="Log files of the incident (PP0 at least).")],
    policy: Annotated[
        str, typer.Option(help="Policies to run besides prefix.")
    ] = "fixed,upstream,drain",
    fmt: Annotated[str, typer.Option("--format", help="table | json")] = "table",
    transfer_seconds: Annotated[
        float | None, typer.Option(help="KV transfer time; default: inferred from the log.")
    ] = None,
    page_size: PageSize = None,
    align: Align = None,
    chunk_size: Chunk = None,
    pool_size: Pool = None,
    rank: Annotated[str | None, typer.Option(help="The deciding rank.")] = None,
    formats: Formats = None,
) -> None:
    """Rebuild the rounds, check the model against them, re-run them under each policy."""
    rr = replay_logs(
        logs,
        split_policies(policy),
        overrides=overrides(page_size, align, chunk_size, pool_size),
        transfer_seconds=transfer_seconds,
        rank=rank,
        progress=fmt != "json",
        formats=formats,
        stock=True,
    )
    d = rr.as_dict()
    if isinstance(rr, StockAnalysis):
        _print_stock(rr, d, fmt)
    if fmt == "json":
        print_json(d)
        sys.exit(rr.exit_code())
    print_log_summary(rr.summary)
    o = d["observed_oom"]
    if not o and rr.summary.cut_lines:
        console.print(
            "[yellow]The log is cut short: an out-of-memory after the cut would not show.[/]"
        )
    if o:
        console.print(
            f"[bold]Logged out of memory[/]: round {o['round']}, {o['rid']}, "
            f"Try to allocate {o['tokens']} tokens, {o['available']} available"
        )
    else:
        console.print("[bold]No out of memory in these logs.[/]")
    fid = d["fidelity"]
    console.print(
        f"Fidelity under prefix: {fid['rounds_checked']} logged rounds re-run, "
        f"{len(fid['mismatches'])} mismatch(es)"
        + (
            ""
            if rr.reproduced is None
            else f"; the out-of-memory is {'reproduced' if rr.reproduced else '[red]NOT reproduced[/]'}"
        )
    )
    for m in fid["mismatches"][:10]:
        console.print(
            f"  round {m['round']} {m['rid']}: {m['field']} logged {m['logged']} model {m['model']} ({m.get('where', '')})"
        )
    t = Table(title=f"Policies from round {d['start_round']}")
    for c in ("policy", "out of memory", "rounds", "unfinished"):
        t.add_column(c)
    for name, p in d["policies"].items():
        oom = p["oom"]
        t.add_row(
            name,
            f"round {oom['round']} {oom['rid']} {oom['tokens']} tokens, {oom['available']} available"
            if oom
            else "none",
            str(p["rounds"]),
            ", ".join(p["unfinished"]) or "-",
        )
    console.print(t)
    for name, p in d["policies"].items():
        delayed = [x for x in p.get("delays", []) if x["delay_s"]]
        for x in delayed:
            console.print(
                f"  {name}: {x['rid']} first token {x['delay_s']:+.2f} s later than under prefix"
            )
    console.print("[bold]Verdict[/]")
    for line in verdict_text(d["root_cause"], o, rr.results):
        console.print("  " + line)
    if d["contradictions"]:
        console.print(f"{len(d['contradictions'])} contradiction(s) in the evidence, e.g.:")
        for c in d["contradictions"][:5]:
            console.print(f"  round {c['round']}: {c['what']}: {c['detail']}")
    console.print("Assumptions:")
    for a in d["assumptions"]:
        console.print("  " + a)
    sys.exit(rr.exit_code())


def _print_stock(a: StockAnalysis, d: dict, fmt: str) -> None:
    """A log without adder lines: what it tells, in JSON or words."""
    if fmt == "json":
        print_json(d)
    else:
        print_log_summary(a.summary)
        for line in stock_text(a):
            console.print(line, highlight=False)
    sys.exit(a.exit_code())
