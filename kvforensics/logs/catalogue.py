"""The format catalogue: line patterns as data (TOML), loaded and checked once.

Patterns live in ``formats/*.toml`` rather than code because every fork words its
debug lines differently; a user adapts the tool with ``--formats FILE`` (same schema).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import polars as pl

from kvforensics.errors import InputError

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

# Kind regexes are written against the message but run on whole lines (cheaper than
# slicing messages off): a leading `^` becomes "start, then an optional bracketed
# prefix". `__m` is empty on a match and null otherwise, so one extract_groups both tests
# and extracts. The prefix's own fields are read in a separate, cheaper pass.
_ANY_PREFIX = r"(?:\[[^\]\n]*\] )?"

# Unicode `\d`/`\s`/`\w` keep Rust's capture engines on a slow path (about 1.7x on
# typical lines); log numbers are ASCII, so the ASCII classes are used instead.
_ASCII = {"d": "[0-9]", "s": r"[\t\n\x0B\f\r ]", "w": "[0-9A-Za-z_]"}
_CLASS_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\([dsw])")


def ascii_classes(regex: str) -> str:
    return _CLASS_ESCAPE.sub(lambda m: m.group(1) + _ASCII[m.group(2)], regex)


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


@dataclass(frozen=True)
class Prefix:
    regex: str
    tags: dict[str, str]  # tag text in the log -> column name
    samples: tuple[dict[str, Any], ...] = ()


@dataclass
class Catalogue:
    prefix: Prefix
    formats: list[Format] = field(default_factory=list)

    def field_types(self) -> dict[str, pl.DataType]:
        out: dict[str, pl.DataType] = {}
        for f in self.formats:
            for fs in f.fields:
                out.setdefault(fs.name, fs.dtype)
        return out

    def schema(self) -> dict[str, pl.DataType]:
        return {**BASE_COLUMNS, **self.field_types(), **TAIL_COLUMNS}


def _check_regex(regex: str, where: str) -> list[str]:
    """Compile with the engine that will run it (Rust regex via polars); return group names."""
    try:
        s = pl.Series([""], dtype=pl.String)
        s.str.contains(regex)
        names = re.findall(r"\(\?P?<([A-Za-z_][A-Za-z0-9_]*)>", regex)
        if names:
            s.str.extract_groups(regex)
    except Exception as exc:  # polars raises ComputeError on a bad pattern
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{where}: invalid regex: {msg}") from None
    return names


def _split_flags(regex: str) -> tuple[str, str]:
    flags = re.match(r"^(\(\?[a-zA-Z]+\))*", regex).group(0)
    return flags, regex[len(flags) :]


def is_anchored(regex: str) -> bool:
    return _split_flags(regex)[1].startswith("^")


def _line_regex(regex: str) -> str:
    flags, body = _split_flags(ascii_classes(regex))
    if body.startswith("^"):
        return f"{flags}^(?P<__m>){_ANY_PREFIX}{body[1:]}"
    return f"{flags}(?P<__m>){body}"


def _field(name: str, spec: Any, where: str, groups: list[str]) -> FieldSpec:
    if isinstance(spec, str):
        spec = {"type": spec}
    if not isinstance(spec, dict) or spec.get("type") not in TYPES:
        raise InputError(f"{where}: field {name!r} needs a type, one of {', '.join(TYPES)}")
    unknown = set(spec) - {"type", "group", "keys", "regex"}
    if unknown:
        raise InputError(f"{where}: field {name!r} has unknown settings {sorted(unknown)}")
    keys = spec.get("keys", ())
    keys = (keys,) if isinstance(keys, str) else tuple(keys)
    regexes = spec.get("regex", ())
    regexes = (regexes,) if isinstance(regexes, str) else tuple(regexes)
    for rx in regexes:
        _check_regex(rx, f"{where}: field {name!r}")
    group = spec.get("group")
    if not keys and not regexes:
        group = group or name
        if group not in groups:
            raise InputError(f"{where}: field {name!r} has no group {group!r} in the regex")
    return FieldSpec(name, spec["type"], group, keys, regexes)


def _format(entry: Any, source: str) -> Format:
    if not isinstance(entry, dict) or not entry.get("name") or not entry.get("regex"):
        raise InputError(f"{source}: every [[format]] needs a name and a regex")
    name = str(entry["name"])
    where = f"{source}: format {name!r}"
    if name in BASE_COLUMNS:
        raise InputError(f"{where}: name clashes with a base column")
    groups = _check_regex(entry["regex"], where)
    if any(g.startswith("__") for g in groups):
        raise InputError(f"{where}: group names starting with __ are reserved")
    fields_raw = entry.get("fields", {})
    fields = tuple(_field(k, v, where, groups) for k, v in fields_raw.items())
    for fs in fields:
        if fs.name in BASE_COLUMNS or fs.name in TAIL_COLUMNS:
            raise InputError(f"{where}: field {fs.name!r} clashes with a base column")
    pairs = None
    if "pairs" in entry:
        p = entry["pairs"]
        if p.get("group") not in groups:
            raise InputError(f"{where}: pairs.group must name a group of the regex")
        pairs = Pairs(p["group"], p.get("sep", ", "), p.get("assign", ": "), bool(p.get("extra")))
    elif any(fs.keys for fs in fields):
        raise InputError(f"{where}: fields with `keys` need a `pairs` setting")
    return Format(
        name=name,
        regex=entry["regex"],
        line_regex="",
        literal=entry.get("literal") or None,
        fields=fields,
        pairs=pairs,
        multiline=bool(entry.get("multiline", False)),
        absorb=tuple(entry.get("absorb", ())),
        samples=tuple(entry.get("samples", ())),
        source=source,
    )


def _read_toml(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{source}: not valid TOML: {exc}") from None


def builtin_texts() -> dict[str, str]:
    """name -> TOML text of each shipped catalogue file, in a stable order."""
    pkg = resources.files("kvforensics.logs") / "formats"
    return {
        p.name: p.read_text(encoding="utf-8")
        for p in sorted(pkg.iterdir(), key=lambda p: p.name)
        if p.name.endswith(".toml")
    }


def load_catalogue(extra_formats: list[Path] | None = None) -> Catalogue:
    """Built-in formats, then the user's files. A user entry with a built-in's name
    replaces it; new user entries are tried first, so they can claim lines."""
    prefix: Prefix | None = None
    builtin: list[Format] = []
    for name, text in builtin_texts().items():
        doc = _read_toml(text, name)
        if "prefix" in doc:
            p = doc["prefix"]
            _check_regex(p["regex"], name)
            prefix = Prefix(ascii_classes(p["regex"]), dict(p["tags"]), tuple(p.get("samples", ())))
        builtin += [_format(e, name) for e in doc.get("format", [])]
    assert prefix is not None, "prefix.toml is part of the package"

    user: list[Format] = []
    for path in extra_formats or []:
        path = Path(path)
        if not path.is_file():
            raise InputError(f"formats file {path} not found")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read formats file {path}: {exc}") from None
        doc = _read_toml(text, str(path))
        entries = doc.get("format", [])
        if not entries:
            raise InputError(f"{path}: no [[format]] entries")
        user += [_format(e, str(path)) for e in entries]

    by_name = {f.name: f for f in user}
    formats = [f for f in user if f.name not in {b.name for b in builtin}]
    formats += [by_name.get(b.name, b) for b in builtin]
    _check_types(formats)
    formats = [replace(f, line_regex=_line_regex(f.regex)) for f in formats]
    for f in formats:
        _check_regex(f.line_regex, f"{f.source}: format {f.name!r}")
    return Catalogue(prefix, formats)


def _check_types(formats: list[Format]) -> None:
    seen: dict[str, tuple[str, str]] = {}
    names: set[str] = set()
    for f in formats:
        if f.name in names:
            raise InputError(f"{f.source}: format {f.name!r} defined twice")
        names.add(f.name)
        for fs in f.fields:
            prev = seen.setdefault(fs.name, (fs.type, f.name))
            if prev[0] != fs.type:
                raise InputError(
                    f"{f.source}: field {fs.name!r} is {fs.type} in {f.name!r} "
                    f"but {prev[0]} in {prev[1]!r}; one column needs one type"
                )
