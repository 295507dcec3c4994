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
