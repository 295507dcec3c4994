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


#: a release log whose out-of-memory shows more available than its pool holds: a
#: contradiction the stock analysis lists
OOM_ABOVE_POOL = (
    "[2026-01-01 00:00:00 TP0] max_total_num_tokens=4000, chunked_prefill_size=2048\n"
    "[2026-01-01 00:00:09 TP0] Prefill out of memory. Try to lower your batch size.\n"
    "Try to allocate 2048 tokens.\n"
    "Available tokens: 5000 (available_size=1000 + evictable_size=4000)\n"
)
