"""The reproducer as a scenario TOML file (what ``kvforensics simulate`` and ``exec`` read).

A small writer for the few value kinds a scenario holds (strings, whole numbers, floats,
booleans, tables and arrays of tables); the result is read back with ``tomllib`` and
``parse_scenario`` before it is written, so a file that would not load is never made."""

from __future__ import annotations

import json
import tomllib
from typing import Any

from kvforensics.scenario import parse_scenario


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        if "\n" in v:
            return '"""\n' + v.replace("\\", "\\\\").replace('"""', '\\"\\"\\"') + '"""'
        return json.dumps(v)  # a TOML basic string is a JSON string for these characters
    raise TypeError(f"no TOML form for {type(v).__name__}")


def dumps(tables: dict[str, Any], comments: dict[str, list[str]] | None = None) -> str:
    """``tables`` as TOML: top-level values first, then tables, then arrays of tables;
    ``comments`` puts lines of ``# ...`` above a key."""
    comments = comments or {}
    lines: list[str] = []

    def note(key: str) -> None:
        lines.extend(f"# {c}" for c in comments.get(key, ()))

    for k, v in tables.items():
        if not isinstance(v, dict | list):
            note(k)
            lines.append(f"{k} = {_value(v)}")
    for k, v in tables.items():
        if isinstance(v, dict):
            lines.append("")
            note(k)
            lines.append(f"[{k}]")
            lines.extend(f"{kk} = {_value(vv)}" for kk, vv in v.items())
    for k, v in tables.items():
        if isinstance(v, list):
            note(k)
            for row in v:
                lines.append("")
                lines.append(f"[[{k}]]")
                lines.extend(f"{kk} = {_value(vv)}" for kk, vv in row.items())
    text = "\n".join(lines) + "\n"
    parse_scenario(tomllib.loads(text), name=str(tables.get("name", "reproducer")))
    return text
