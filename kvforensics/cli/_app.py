"""The typer application; each command module registers itself on it."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="kvforensics",
    help="Rebuild prefill scheduling rounds from SGLang logs and explain KV out-of-memory crashes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from kvforensics import __version__
        from kvforensics._compiled import describe

        typer.echo(f"kvforensics {__version__} ({describe()})")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Rebuild prefill scheduling rounds from SGLang logs and explain KV out-of-memory crashes."""
