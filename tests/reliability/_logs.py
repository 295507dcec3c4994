"""A small deciding-rank log to damage: startup lines, one adder round, an out-of-memory."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import FIXTURES

SAMPLE = FIXTURES / "logs" / "samples" / "incident-pp0.log"


def write_log(tmp: Path, replace: dict[str, str] | None = None, name: str = "pp0.log") -> Path:
    text = SAMPLE.read_text()
    for old, new in (replace or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp / name
    path.write_text(text)
    return path
