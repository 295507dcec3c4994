"""Sample lines of a catalogue, checked against what they say they parse to.

The built-in samples are checked by the tests; a user's `--formats` file is checked when
it loads, so that a pattern that does not do what its author meant fails at once, with
the sample named, rather than silently matching nothing."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from datetime import datetime, time
from typing import Any

import polars as pl

from kvforensics.errors import InputError
from kvforensics.logs.extract import extract_chunk, prefix_columns
from kvforensics.logs.forms import Catalogue, Format, Prefix

PREFIX_KEYS = ("time", "clock", "time_has_ms", "rank")


def parse_sample(cat: Catalogue, text: str) -> tuple[pl.DataFrame, int]:
    """(events, unmatched line count) of one sample's text."""
    lines = pl.Series("text", text.rstrip("\n").split("\n"), dtype=pl.String)
    lines = pl.select(pl.when(lines.str.strip_chars() != "").then(lines)).to_series()
    events, stats = extract_chunk(lines, 1, "sample", cat)
    return events, stats.unmatched


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, float):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)
    return bool(got == want)


def format_sample_problems(cat: Catalogue, fmt: Format, sample: dict[str, Any]) -> list[str]:
    """What differs between a format sample's expectation and its parse (empty: none)."""
    events, unmatched = parse_sample(cat, sample["line"])
    if events.height != 1:
        return [f"gives {events.height} events, expected 1"]
    row = events.row(0, named=True)
    out = []
    if row["kind"] != fmt.kind:
        out.append(f"is read as {row['kind']!r}, expected {fmt.kind!r}")
    if unmatched:
        out.append(f"leaves {unmatched} line(s) unmatched")
    expect = dict(sample.get("expect", {}))
    extra = expect.pop("extra", None)
    got_extra = json.loads(row["extra"]) if row["extra"] else None
    if got_extra != extra:
        out.append(f"extra is {got_extra!r}, expected {extra!r}")
    attached = expect.pop("attached", None)
    if attached is not None and row["attached"] != attached.rstrip("\n"):
        out.append("attached lines differ")
    unknown = sorted(set(expect) - set(row))
    if unknown:
        out.append(f"expects fields {unknown} that no format defines")
    for name in sorted(set(cat.field_types()) | set(expect)):
        want, why = _want(name, expect[name]) if name in expect else (None, None)
        if why:
            out.append(why)
        elif name in row and not _same(row[name], want):
            out.append(f"{name} is {row[name]!r}, expected {want!r}")
    return out


#: what a prefix sample's expected time and clock are: the value they parse to, and how
#: a user's file may write them (text, with or without fractional seconds, or TOML's own)
_TIMES = {
    "time": (datetime, datetime.fromisoformat, "a date and time like '2025-06-05 15:08:56'"),
    "clock": (time, time.fromisoformat, "a time of day like '15:08:56.123'"),
}


def _want(key: str, value: Any) -> tuple[Any, str | None]:
    """The value an ``expect`` entry means, or why it means none (a problem to report)."""
    if key not in _TIMES:
        return value, None
    kind, parse, like = _TIMES[key]
    if isinstance(value, kind):
        return value, None  # a TOML date-time or time, unquoted
    try:
        return parse(value), None
    except (TypeError, ValueError):
        return None, f"expects {key} {value!r}, which is not {like}"


def prefix_sample_problems(cat: Catalogue, sample: dict[str, Any]) -> list[str]:
    """What differs between a prefix sample's expectation and the prefix read off its line;
    keys not given are expected empty (null, or "" for rank)."""
    row = prefix_columns(pl.DataFrame({"text": [sample["line"]]}), cat).row(0, named=True)
    expect = sample.get("expect", {})
    out = []
    keys = (*PREFIX_KEYS, *cat.prefix.tags.values())
    for key in sorted(set(expect) - set(keys)):
        out.append(f"expects {key!r}, which a prefix does not give")
    for key in keys:
        default = "" if key == "rank" else (False if key == "time_has_ms" else None)
        want, why = _want(key, expect[key]) if key in expect else (default, None)
        if why:
            out.append(why)
            continue
        if key == "clock" and key not in expect:
            continue  # implied by time
        if row[key] != want:
            out.append(f"{key} is {row[key]!r}, expected {want!r}")
    return out


def check_user_samples(cat: Catalogue, user: Iterable[Format], prefix: Prefix | None) -> None:
    """Raise a one-line InputError for the first user sample that does not parse as it says."""
    if prefix is not None:
        for i, s in enumerate(prefix.samples):
            bad = prefix_sample_problems(cat, s)
            if bad:
                raise InputError(f"{prefix.source}: [prefix] sample {i + 1}: {'; '.join(bad[:3])}")
    for fmt in user:
        for i, s in enumerate(fmt.samples):
            if "line" not in s:
                raise InputError(f"{fmt.source}: format {fmt.name!r} sample {i + 1} has no line")
            bad = format_sample_problems(cat, fmt, s)
            if bad:
                raise InputError(
                    f"{fmt.source}: format {fmt.name!r} sample {i + 1} "
                    f"({s['line'][:60]!r}): {'; '.join(bad[:3])}"
                )
