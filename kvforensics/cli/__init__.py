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


# Command modules register themselves on `app` when imported.
from kvforensics.cli import (  # noqa: E402
    diff,  # noqa: F401
    exec,  # noqa: F401
    explain,  # noqa: F401
    parse,  # noqa: F401
    replay,  # noqa: F401
    report,  # noqa: F401
    reproduce,  # noqa: F401
    rounds,  # noqa: F401
    scan,  # noqa: F401
    simulate,  # noqa: F401
)


def main() -> None:
    try:
        # not standalone: usage errors come here, to be said in one line like ours
        code = app(standalone_mode=False)
    except typer.Abort:
        typer.echo("error: aborted", err=True)
        sys.exit(130)
    except typer.TyperException as exc:  # click's usage errors: bad option, missing argument
        ctx = getattr(exc, "ctx", None)
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        text = " ".join(message.split()).rstrip(".")
        if not text and ctx is not None:  # no arguments at all: the help is the answer
            typer.echo(ctx.get_help())
        else:
            hint = f"; see {ctx.command_path} --help" if ctx is not None else ""
            typer.echo(f"error: {text}{hint}", err=True)
        sys.exit(getattr(exc, "exit_code", 2))
    except KvfError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except OSError as exc:
        if exc.filename is None:  # not about a file the user named: a bug of ours
            _internal(exc)
        # the environment refused a path the user gave (permissions, space, name length)
        typer.echo(f"error: {exc.filename}: {exc.strerror or exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("error: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:
        _internal(exc)
    sys.exit(code if isinstance(code, int) else 0)


def _internal(exc: BaseException) -> None:
    """A bug of ours: still one line, and a distinct exit code (EX_SOFTWARE)."""
    text = f"internal error: {type(exc).__name__}: {exc}".splitlines()[0][:300]
    typer.echo(text, err=True)
    sys.exit(70)
