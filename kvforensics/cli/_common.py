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
