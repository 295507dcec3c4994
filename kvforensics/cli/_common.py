"""Small helpers shared by command modules."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape

from kvforensics.logs.summary import ParseSummary
from kvforensics.progress import Stages
from kvforensics.report.terminal import paragraph, preview
from kvforensics.rounds.records import Contradiction

# No highlighter: its regexes run over every value printed, and on a long one (a
# 100,000-character rid) they cost minutes; what is worth a colour is marked up.
console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def print_json(obj: Any) -> None:
    """Plain JSON on stdout (no rich markup, so it can be piped)."""
    print(json.dumps(obj, indent=2, default=str))


def split_policies(text: str) -> list[str]:
    """``"prefix,fixed"`` -> names, checked against the model's policies."""
    from kvforensics.report.inputs import check_policies

    return check_policies([p.strip() for p in text.split(",") if p.strip()])


def stages(on: bool = True) -> Stages:
    """The command's progress display on stderr: off when asked (``--no-progress``) or
    when stderr is not a terminal."""
    return Stages(err_console, enabled=on and err_console.is_terminal)


def print_para(text: str, indent: int = 2, hang: int = 4) -> None:
    """One paragraph of prose, wrapped to the terminal with a hanging indent."""
    console.print(paragraph(text, console.width, indent, hang), highlight=False, markup=False)


def print_contradictions(items: Sequence[Contradiction], limit: int) -> None:
    """How many contradictions (``rounds.records.Contradiction``), then the first few,
    each a paragraph of its own."""
    console.print(f"{len(items)} contradiction(s) in the evidence" + (":" if items else ""))
    for c in items[:limit]:
        where = f"round {c.round}: " if c.round is not None else ""
        print_para(f"{where}{c.what}: {c.detail}")
    if len(items) > limit:
        console.print(f"  ... and {len(items) - limit} more (--format json lists all)")


def print_log_summary(summary: ParseSummary) -> None:
    """One line on what was read, then what could not be: unmatched lines, cuts, gaps."""
    files = len(summary.files)
    console.print(
        f"Read {files} file(s), {summary.lines} lines, {summary.events} events; "
        f"{summary.unmatched} line(s) matched no format"
    )
    for f in summary.files:
        if getattr(f, "wrapper", None):  # learned from the file (logs/wrapper.py)
            print_para(f"{f.path}: {f.wrapper}; read behind it")
    for sample in summary.unmatched_samples[:3]:
        where = ":".join(str(x) for x in sample[:2])
        print_para(f"unmatched: {where}: {preview(sample[-1], 100)}")
    undated = getattr(summary, "undated_events", 0)
    if undated:
        console.print(
            f"[yellow]{undated} event(s) have no date in their prefix[/] (time of day only, or "
            "none): their order is the line order"
        )
    if summary.unreadable:
        console.print(
            f"[yellow]{summary.unreadable} line(s) hold numbers a log cannot mean[/]; not used"
        )
    for path, line, why in summary.unreadable_samples[:3]:
        print_para(f"unreadable: {path}:{line}: {preview(why, 100)}")
    for path in summary.cut_lines:
        console.print(f"[yellow]{escape(str(path))} ends in a cut line[/]: the log stops mid-write")
    for gap in summary.gaps:
        console.print(f"[yellow]gap[/]: {escape(gap)}")


def print_notes(notes: list[str]) -> None:
    """What the log reader could not read, one ``note:`` line each on stderr (stdout may
    be JSON or markdown)."""
    for note in notes:
        err_console.print(f"note: {note.strip()}", highlight=False, markup=False, soft_wrap=True)
