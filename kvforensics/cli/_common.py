"""Small helpers shared by command modules."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console

console = Console()
err_console = Console(stderr=True)


def print_json(obj: Any) -> None:
    """Plain JSON on stdout (no rich markup, so it can be piped)."""
    print(json.dumps(obj, indent=2, default=str))


def split_policies(text: str) -> list[str]:
    """``"prefix,fixed"`` -> names, checked against the model's policies."""
    from kvforensics.errors import InputError
    from kvforensics.model import POLICIES

    names = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in names if p not in POLICIES]
    if bad or not names:
        raise InputError(
            f"unknown policy {', '.join(bad) or '(none)'}; choose from {', '.join(POLICIES)}"
        )
    return names


def progress_bar():
    """A transient bar on stderr, shown only on a terminal (never in pipes or JSON)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=not err_console.is_terminal,
    )


def print_log_summary(summary) -> None:
    """One line on what was read, then what could not be: unmatched lines, cuts, gaps."""
    files = len(summary.files)
    console.print(
        f"Read {files} file(s), {summary.lines} lines, {summary.events} events; "
        f"{summary.unmatched} line(s) matched no format"
    )
    for sample in summary.unmatched_samples[:3]:
        console.print(
            f"  unmatched: {':'.join(str(x) for x in sample[:2])}: {str(sample[-1])[:100]}",
            highlight=False,
            markup=False,
        )
    undated = getattr(summary, "undated_events", 0)
    if undated:
        console.print(
            f"[yellow]{undated} event(s) have no date in their prefix[/] (time of day only, or "
            "none): their order is the line order"
        )
    for path in summary.cut_lines:
        console.print(f"[yellow]{path} ends in a cut line[/]: the log stops mid-write")
    for gap in summary.gaps:
        console.print(f"[yellow]gap[/]: {gap}", highlight=False)
