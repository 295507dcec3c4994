"""The format catalogue: line patterns as data (TOML), loaded and checked once.

Patterns live in ``formats/*.toml`` rather than code because every fork words its
debug lines differently; a user adapts the tool with ``--formats FILE`` (same schema).
"""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import polars as pl

from kvforensics.errors import InputError
from kvforensics.logs.catalogue_schema import check_catalogue_shape
from kvforensics.logs.forms import (
    BASE_COLUMNS,
    TAIL_COLUMNS,
    TYPES,
    Catalogue,
    FieldSpec,
    Format,
    Pairs,
    Prefix,
    WrapperForm,
    ascii_classes,
    split_flags,
)
from kvforensics.logs.samples import check_user_samples

# Kind regexes are written against the message but run on whole lines (cheaper than
# slicing messages off): a leading `^` becomes "start, then an optional prefix". For
# SGLang's own prefix any bracketed text will do; a user's prefix regex is used as
# written (its groups made non-capturing). `__m` is empty on a match and null otherwise,
# so one extract_groups both tests and extracts. The prefix's own fields are read in a
# separate, cheaper pass.
_GROUP_OPEN = re.compile(r"\(\?P?<([A-Za-z_][A-Za-z0-9_]*)>")
PREFIX_GROUPS = ("time", "ms", "rank")


def _check_regex(regex: str, where: str) -> list[str]:
    """Compile with the engine that will run it (Rust regex via polars); return group names."""
    try:
        s = pl.Series([""], dtype=pl.String)
        s.str.contains(regex)
        names = re.findall(r"\(\?P?<([A-Za-z_][A-Za-z0-9_]*)>", regex)
        if names:
            s.str.extract_groups(regex)
    except Exception as exc:  # polars raises ComputeError on a bad pattern
        # the engine's message is a caret diagram under a first line; the "error:"
        # line after it says what is wrong
        lines = [ln.strip() for ln in str(exc).splitlines()]
        why = [ln.removeprefix("error: ") for ln in lines[1:] if ln.startswith("error:")]
        msg = ": ".join([lines[0].rstrip(": "), *why[:1]]) if lines else type(exc).__name__
        raise InputError(f"{where}: invalid regex: {msg}") from None
    return names


def _line_regex(regex: str, prefix: Prefix, needs_prefix: bool = False) -> str:
    flags, body = split_flags(ascii_classes(regex))
    if body.startswith("^"):
        pre = prefix.required if needs_prefix else prefix.optional
        return f"{flags}^(?P<__m>){pre}{body[1:]}"
    return f"{flags}(?P<__m>){body}"


def _prefix(p: Any, source: str, builtin: bool) -> Prefix:
    if not isinstance(p, dict) or not isinstance(p.get("regex"), str):
        raise InputError(f"{source}: [prefix] needs a regex")
    unknown = set(p) - {"regex", "tags", "samples", "time_format", "continues"}
    if unknown:
        raise InputError(f"{source}: [prefix] has unknown settings {sorted(unknown)}")
    regex = p["regex"]
    groups = _check_regex(regex, f"{source}: [prefix]")
    try:
        re.compile(regex)
    except re.error as exc:
        raise InputError(f"{source}: [prefix]: invalid regex: {exc}") from None
    if not regex.startswith("^"):
        raise InputError(f"{source}: [prefix] regex must start with ^ (it matches at line start)")
    odd = sorted(set(groups) - set(PREFIX_GROUPS))
    if odd:
        raise InputError(f"{source}: [prefix] groups {odd} unknown; use {', '.join(PREFIX_GROUPS)}")
    tags = dict(p.get("tags") or DEFAULT_TAGS)
    out = Prefix(
        ascii_classes(regex),
        tags,
        tuple(p.get("samples", ())),
        str(p.get("time_format", Prefix.time_format)),
        source,
        p.get("continues") or None,
    )
    if out.continues:
        _check_regex(out.continues, f"{source}: [prefix] continues")
    if builtin:
        return out
    body = _GROUP_OPEN.sub("(?:", ascii_classes(regex))[1:]
    return replace(out, optional=f"(?:{body})?", required=f"(?:{body})")


DEFAULT_TAGS = {
    "DP": "dp",
    "PP": "pp",
    "ATTN_CP": "attn_cp",
    "MOE_DP": "moe_dp",
    "TP": "tp",
    "EP": "ep",
}


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
    known = {
        "name",
        "regex",
        "literal",
        "fields",
        "pairs",
        "multiline",
        "absorb",
        "samples",
        "kind",
        "needs_prefix",
        "nested",
        "promote",
    }
    unknown = sorted(set(entry) - known)
    if unknown:
        raise InputError(f"{where}: unknown settings {unknown}")
    for rx in [entry.get("nested"), (entry.get("promote") or {}).get("when")]:
        if rx:
            _check_regex(rx, where)
    promote = entry.get("promote")
    if promote is not None and not (promote.get("format") and promote.get("when")):
        raise InputError(f"{where}: promote needs a format and a when regex")
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
        kind=str(entry.get("kind") or name),
        needs_prefix=bool(entry.get("needs_prefix", False)),
        nested=entry.get("nested") or None,
        promote=(promote["format"], promote["when"]) if promote else None,
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
    replaces it; new user entries are tried first, so they can claim lines. A user's
    `[prefix]` replaces SGLang's. The samples of the user's files are run here: a
    sample that does not parse as it says is a one-line error naming it.

    A run asks for the catalogue at several stages: the one for the same user files
    (same paths, sizes and modification times) is built once."""
    key = tuple(_file_key(Path(p)) for p in extra_formats or [])
    return _load(key)


def _file_key(path: Path) -> tuple[str, int, int]:
    """What identifies a user's formats file for the cache (a changed file is read again)."""
    try:
        st = path.stat()
    except OSError:
        return (str(path), -1, -1)  # ``_read_user_file`` says what is wrong with it
    return (str(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _load(key: tuple[tuple[str, int, int], ...]) -> Catalogue:
    prefix, builtin, wrappers = _builtin()
    user: list[Format] = []
    user_prefix: Prefix | None = None
    for path in (Path(k[0]) for k in key):
        doc = _read_user_file(path)
        check_catalogue_shape(doc, str(path))
        if "prefix" in doc:
            user_prefix = _prefix(doc["prefix"], str(path), builtin=False)
        entries = doc.get("format", [])
        if not entries and "prefix" not in doc:
            raise InputError(f"{path}: no [[format]] entries and no [prefix]")
        user += [_format(e, str(path)) for e in entries]
    prefix = user_prefix or prefix

    by_name = {f.name: f for f in user}
    formats = [f for f in user if f.name not in {b.name for b in builtin}]
    formats += [by_name.get(b.name, b) for b in builtin]
    _check_types(formats)
    _check_promotions(formats)
    formats = [replace(f, line_regex=_line_regex(f.regex, prefix, f.needs_prefix)) for f in formats]
    for f in formats:
        _check_regex(f.line_regex, f"{f.source}: format {f.name!r}")
    cat = Catalogue(prefix, tuple(formats), wrappers)
    if key:
        check_user_samples(cat, user, user_prefix)
    return cat


@functools.cache
def _builtin() -> tuple[Prefix, tuple[Format, ...], tuple[WrapperForm, ...]]:
    """The shipped catalogue files, parsed and checked once a process."""
    prefix: Prefix | None = None
    builtin: list[Format] = []
    wrappers: list[WrapperForm] = []
    for name, text in builtin_texts().items():
        doc = _read_toml(text, name)
        if "prefix" in doc:
            prefix = _prefix(doc["prefix"], name, builtin=True)
        builtin += [_format(e, name) for e in doc.get("format", [])]
        wrappers += [_wrapper(e, name) for e in doc.get("wrapper", [])]
    assert prefix is not None, "prefix.toml is part of the package"
    return prefix, tuple(builtin), tuple(wrappers)


WRAPPER_GROUPS = ("time", "frac", "clock")


def _wrapper(entry: Any, source: str) -> WrapperForm:
    if not isinstance(entry, dict) or not entry.get("name") or not entry.get("regex"):
        raise InputError(f"{source}: every [[wrapper]] needs a name and a regex")
    where = f"{source}: wrapper {entry['name']!r}"
    regex = ascii_classes(str(entry["regex"]))
    if not regex.startswith("^"):
        raise InputError(f"{where}: regex must start with ^")
    odd = sorted(set(_check_regex(regex, where)) - set(WRAPPER_GROUPS))
    if odd:
        raise InputError(f"{where}: groups {odd} unknown; use {', '.join(WRAPPER_GROUPS)}")
    return WrapperForm(
        str(entry["name"]),
        str(entry.get("says") or entry["name"]),
        regex,
        str(entry.get("time_format", WrapperForm.time_format)),
        tuple(entry.get("samples", ())),
        source,
    )


def _read_user_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise InputError(f"formats file {path} not found")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read formats file {path}: {exc}") from None
    return _read_toml(text, str(path))


def _check_promotions(formats: list[Format]) -> None:
    names = {f.name for f in formats}
    for f in formats:
        if f.promote and f.promote[0] not in names:
            raise InputError(f"{f.source}: format {f.name!r} promotes to unknown {f.promote[0]!r}")


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
