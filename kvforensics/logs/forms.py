"""The catalogue's forms: what a line format, the line prefix and a wrapper are, and the
columns an event has. ``catalogue`` loads them from TOML; the readers only use them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import polars as pl

TYPES: dict[str, pl.DataType] = {
    "int": pl.Int64(),
    "float": pl.Float64(),
    "bool": pl.Boolean(),
    "str": pl.String(),
    "list": pl.List(pl.String()),
}

# Columns every event has; catalogue fields may not reuse these names.
BASE_COLUMNS: dict[str, pl.DataType] = {
    "file": pl.String(),
    "line": pl.Int64(),
    "time": pl.Datetime("ms"),
    "time_has_ms": pl.Boolean(),
    # time of day as printed; the only time when the prefix has no date (`[03:51:54]`)
    "clock": pl.Time(),
    "rank": pl.String(),
    "dp": pl.Int64(),
    "pp": pl.Int64(),
    "attn_cp": pl.Int64(),
    "moe_dp": pl.Int64(),
    "tp": pl.Int64(),
    "ep": pl.Int64(),
    "kind": pl.String(),
}
TAIL_COLUMNS: dict[str, pl.DataType] = {
    "extra": pl.String(),
    "attached": pl.String(),
    "truncated": pl.Boolean(),
}

# SGLang's own prefix: any bracketed text
BRACKETED = r"\[[^\]\n]*\] "

# Unicode `\d`/`\s`/`\w` keep Rust's capture engines on a slow path (about 1.7x on
# typical lines); log numbers are ASCII, so the ASCII classes are used instead.
_ASCII = {"d": "0-9", "s": r"\t\n\x0B\f\r ", "w": "0-9A-Za-z_"}


def ascii_classes(regex: str) -> str:
    """`\\d`, `\\s`, `\\w` as ASCII ranges; inside `[...]` without brackets of their own,
    so that Python's engine (chunk cutting) and polars' read the same set."""
    out, i, depth = [], 0, 0
    while i < len(regex):
        c = regex[i]
        if c == "\\" and i + 1 < len(regex):
            e = regex[i + 1]
            if e in _ASCII:
                out.append(_ASCII[e] if depth else f"[{_ASCII[e]}]")
            else:
                out.append(c + e)
            i += 2
            continue
        if c == "[" and not depth:
            depth = 1
            out.append(c)
            # a `]` or `^]` right after the opening bracket is a literal
            if regex[i + 1 : i + 3] == "^]":
                out.append("^]")
                i += 2
            elif regex[i + 1 : i + 2] == "]":
                out.append("]")
                i += 1
        elif c == "]" and depth:
            depth = 0
            out.append(c)
        else:
            out.append(c)
        i += 1
    return "".join(out)


@dataclass(frozen=True)
class FieldSpec:
    name: str
    type: str
    group: str | None = None  # named group of the entry regex
    keys: tuple[str, ...] = ()  # looked up in the entry's `key: value` pairs
    regexes: tuple[str, ...] = ()  # searched in the message; first capture, first hit wins

    @property
    def dtype(self) -> pl.DataType:
        return TYPES[self.type]


@dataclass(frozen=True)
class Pairs:
    group: str
    sep: str
    assign: str
    extra: bool


@dataclass(frozen=True)
class Format:
    name: str
    regex: str  # as written (message-anchored)
    line_regex: str  # applied to whole lines; set by load_catalogue
    literal: str | None
    fields: tuple[FieldSpec, ...]
    pairs: Pairs | None = None
    multiline: bool = False
    absorb: tuple[str, ...] = ()
    samples: tuple[dict[str, Any], ...] = ()
    source: str = ""
    kind: str = ""  # the events' kind; several formats may share one (default: the name)
    needs_prefix: bool = False  # only lines with a prefix (e.g. a bare `Traceback` is not one)
    # a head matching this that has no prefix and falls inside another multi-line message
    # is a copy quoted in it (the `RuntimeError: ...` of a traceback), not a new event
    nested: str | None = None
    # (format name, regex): an event whose whole message matches is that format's instead
    promote: tuple[str, str] | None = None

    def key_pairs(self) -> Pairs:
        """The ``key: value`` pairs of a format with key fields (the catalogue requires them)."""
        assert self.pairs is not None
        return self.pairs


@dataclass(frozen=True)
class Prefix:
    """The line prefix: groups `time` (date and time, or time of day only), `ms` and
    `rank` (the rank tags), each optional."""

    regex: str
    tags: dict[str, str]  # tag text in the log -> column name
    samples: tuple[dict[str, Any], ...] = ()
    time_format: str = "%Y-%m-%d %H:%M:%S"
    source: str = ""
    # a prefixed line whose message matches this continues the message above (a wrapper
    # that prefixes every line, traceback lines included)
    continues: str | None = None
    # what a kind regex puts between `^` and its message: optional / required prefix
    optional: str = f"(?:{BRACKETED})?"
    required: str = f"(?:{BRACKETED})"


@dataclass(frozen=True)
class WrapperForm:
    """One form of text in front of SGLang's own (formats/wrapper.toml)."""

    name: str
    says: str
    regex: str  # anchored at the line start; groups `time`, `frac`, `clock`, each optional
    time_format: str = "%Y-%m-%d %H:%M:%S"
    samples: tuple[dict[str, Any], ...] = ()
    source: str = ""


@dataclass(frozen=True)
class Catalogue:
    """Immutable: ``load_catalogue`` hands the same one to every reader of a run."""

    prefix: Prefix
    formats: tuple[Format, ...] = ()
    wrappers: tuple[WrapperForm, ...] = ()

    @property
    def learns_wrappers(self) -> bool:
        """A user's own `[prefix]` says how its lines start: nothing is learned then."""
        return bool(self.wrappers) and self.prefix.source == "prefix.toml"

    def field_types(self) -> dict[str, pl.DataType]:
        out: dict[str, pl.DataType] = {}
        for f in self.formats:
            for fs in f.fields:
                out.setdefault(fs.name, fs.dtype)
        return out

    def schema(self) -> dict[str, pl.DataType]:
        return {**BASE_COLUMNS, **self.field_types(), **TAIL_COLUMNS}


def split_flags(regex: str) -> tuple[str, str]:
    m = re.match(r"^(\(\?[a-zA-Z]+\))*", regex)
    assert m is not None  # the pattern matches the empty start of any text
    flags = m.group(0)
    return flags, regex[len(flags) :]


def is_anchored(regex: str) -> bool:
    return split_flags(regex)[1].startswith("^")
