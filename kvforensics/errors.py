"""Errors a user can act on. The CLI prints them as one line and exits non-zero."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvforensics.clip import clip

if TYPE_CHECKING:
    from pydantic import ValidationError


class KvfError(Exception):
    """A problem with the user's input or environment (bad file, missing flag...).

    The message must fit on one line and say what to do about it.
    """

    exit_code = 2


class InputError(KvfError):
    """Unreadable, missing or malformed input."""


class MissingConfigError(KvfError):
    """A size the replay needs was neither in the log nor given on the command line."""


def validation_line(exc: ValidationError, name: str, fix: str) -> str:
    """A pydantic ValidationError's first complaint as one line: the file, the field's
    path, what is wrong with the value, how many more, and what to do."""
    errs = exc.errors(include_url=False)
    e = errs[0]
    msg = e["msg"].removeprefix("Value error, ")
    quiet = ("missing", "extra_forbidden", "value_error")
    got = "" if e["type"] in quiet else f" (got {_shown(e['input'])})"
    if e["type"] == "extra_forbidden":
        msg = "unknown key"
    more = f"; {len(errs) - 1} more problem(s)" if len(errs) > 1 else ""
    return f"{name}: {_where(e['loc'])}: {msg}{got}{more}; {fix}"


def _where(loc: tuple[Any, ...]) -> str:
    """('waiting', 1, 'seq_len') -> 'waiting[1].seq_len'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _shown(value: object) -> str:
    text = repr(value)
    return clip(text, 40)
