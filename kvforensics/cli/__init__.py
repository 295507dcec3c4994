"""Command-line shell. Each command module only parses arguments and calls the library."""

from __future__ import annotations

import sys

import typer

from kvforensics.errors import KvfError

app = typer.Typer(
    name="kvforensics",
    help="Rebuild prefill scheduling rounds from SGLang logs and explain KV out-of-memory crashes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Command modules register themselves on `app` when imported.
from kvforensics.cli import simulate  # noqa: E402,F401


def main() -> None:
    try:
        app(standalone_mode=True)
    except KvfError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
