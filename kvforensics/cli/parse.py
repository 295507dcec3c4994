"""`kvforensics parse`: scheduler logs -> an events file, plus a summary of what was read."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvforensics.cli._app import app
from kvforensics.cli._common import stages
from kvforensics.logs import ParseSummary, load_catalogue
from kvforensics.logs.source import check_readable
from kvforensics.logs.writers import events_lazy, output_kind, sink_events
from kvforensics.outputs import atomic_write, check_output
from kvforensics.report.terminal import preview
from kvforensics.rounds.stream import Narrow


@app.command()
def parse(
    logs: Annotated[
        list[Path], typer.Argument(help="Log files (plain or gzip), one per rank or restart.")
    ],
    out: Annotated[
        Path, typer.Option("-o", "--out", help="Events file: .parquet, .csv or .ndjson.")
    ],
    formats: Annotated[
        list[Path] | None,
        typer.Option("--formats", help="Extra format catalogue TOML (repeatable)."),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(help="Only events from this time on ('2026-11-02 15:00:00'; inclusive)."),
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Only events up to this time (inclusive).")
    ] = None,
    progress: Annotated[
        bool,
        typer.Option(help="Progress on stderr (off anyway when stderr is not a terminal)."),
    ] = True,
) -> None:
    """Read scheduler logs into typed events (one row per recognised line). ``--since`` and
    ``--until`` take times only: parse gives events, not rounds."""
    keep = Narrow.parse(since, until).events()
    kind = output_kind(out)
    check_output(out, [*logs, *(formats or [])])
    for log in logs:  # before the sink starts: a missing input then costs nothing
        check_readable(log)
    cat = load_catalogue(formats)
    summary = ParseSummary()
    with stages(progress):
        lf = events_lazy(logs, summary, catalogue=cat, keep=keep)
        atomic_write(out, lambda tmp: sink_events(lf, tmp, kind))
    print_summary(summary, out, keep)


def print_summary(s: ParseSummary, out: Path, keep: pl.Expr | None = None) -> None:
    # soft_wrap: lines stay whole (paths, samples) so they can be grepped and copied
    console = Console(soft_wrap=True, highlight=False)
    mb = s.bytes_read / 1e6
    console.print(
        f"read {len(s.files)} file(s), {mb:.1f} MB, {s.lines} lines -> "
        f"{s.events_kept} events in {escape(str(out))}"
    )
    if keep is not None:
        console.print(
            f"  --since/--until: {s.events - s.events_kept} event(s) outside those times left out"
            + (f"; {s.untimed_kept} without a time kept" if s.untimed_kept else "")
        )
    table = Table(title="events by kind")
    table.add_column("kind")
    table.add_column("lines", justify="right")
    kept = {k: n - s.outside_times.get(k, 0) for k, n in s.matched.items()}
    for k, n in sorted(kept.items(), key=lambda kv: -kv[1]):
        if n:
            table.add_row(escape(k), str(n))
    table.add_row("[dim]attached to multi-line events[/]", str(s.attached_lines))
    table.add_row("[yellow]unmatched[/]", str(s.unmatched))
    if s.unreadable:
        table.add_row("[yellow]unreadable numbers[/]", str(s.unreadable))
    console.print(table)
    for f in s.files:
        ranks = ", ".join(sorted(f.ranks)) or "no rank tags"
        console.print(f"  {escape(f.path)}{' (gzip)' if f.gzip else ''}: {f.lines} lines, {ranks}")
    if s.unmatched_samples:
        console.print("unmatched lines (first few):")
        for path, line, text in s.unmatched_samples:
            console.print(f"  {escape(path)}:{line}: {escape(preview(text, 160))}")
    for path, line, why in s.unreadable_samples:
        console.print(f"  unreadable: {escape(path)}:{line}: {escape(why)}")
    if s.decode_node:
        console.print(
            "[bold yellow]warning:[/] Decode batch lines found: this log is from a "
            "decode or colocated node, not a prefill-only node"
        )
    for path in s.cut_lines:
        console.print(
            f"[yellow]note:[/] {escape(path)} ends in a cut line (no newline at the end): "
            "its last line may be cut short (flagged `truncated`)"
        )
    for gap in s.gaps:
        console.print(f"[bold yellow]gap:[/] {escape(gap)}")
