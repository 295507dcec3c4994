"""The corpus of real excerpts (fixtures/logs/stock): each log with the sidecar that
names its source and says what it must yield."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

STOCK = Path(__file__).resolve().parents[2] / "fixtures" / "logs" / "stock"


@dataclass(frozen=True)
class Excerpt:
    log: Path
    source: dict
    expect: dict

    @property
    def formats(self) -> list[Path]:
        f = self.expect.get("formats")
        return [STOCK / f] if f else []


def excerpts() -> list[Excerpt]:
    out = []
    for log in sorted(STOCK.glob("*.log")):
        doc = tomllib.loads(log.with_suffix(".toml").read_text(encoding="utf-8"))
        out.append(Excerpt(log, doc["source"], doc["expect"]))
    return out


def params():
    return [pytest.param(e, id=e.log.stem) for e in excerpts()]
