"""scripts/count_key_reads.py tells a stage result's string-key read from the input edge's:
a frame's column or row, the environment, a TOML table, an allow-listed function; an
annotation's ``Literal["x"]`` is no read at all."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location(
    "count_key_reads", ROOT / "scripts" / "count_key_reads.py"
)
assert _SPEC is not None and _SPEC.loader is not None
ckr = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = ckr  # its dataclass looks its module up there
_SPEC.loader.exec_module(ckr)

SOURCE = """
import os
from typing import Literal, NamedTuple

import polars as pl


class Row(NamedTuple):
    kind: Literal["oom"]


def frames(events: pl.DataFrame, result: dict) -> int:
    first = events.filter(pl.col("kind") == "oom")["rank"]
    rows = events.to_dicts()
    ranks = {r["rank"] for r in rows}
    for ev in events.iter_rows(named=True):
        ranks.add(ev.get("rank"))
    for i, ev in enumerate(events.iter_rows(named=True)):
        ranks.add(ev["rank"])
    return len(first) + len(ranks) + result["count"] + int(os.environ.get("N", "0"))


def _sizes_from_toml(table: dict) -> int:
    return table["page_size"]


def as_dict(result: dict) -> dict:
    return {"count": result["count"]}
"""


def test_reads_are_classified(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text(SOURCE)
    got = [(r.line, r.why) for r in ckr.classified(f)]
    why = {line: w for line, w in got}
    assert len(got) == 7  # the Literal is no read; as_dict is the JSON edge
    assert why[13] == "a polars column"
    assert why[15] == why[17] == why[19] == "a polars frame row"
    assert why[24] == "a TOML table"
    stage = [line for line, w in got if w is None]
    assert stage == [20]  # result["count"]; os.environ.get on the same line is input
    assert [w for line, w in got if line == 20] == [None, "the environment"]


def test_the_allow_list_names_a_function_and_says_why(tmp_path: Path) -> None:
    pkg = tmp_path / "kvforensics" / "replay"
    pkg.mkdir(parents=True)
    f = pkg / "stock.py"
    f.write_text(
        "def analyse_stock(overrides):\n    return overrides.get('pool_size')\n\n"
        "def other(result):\n    return result.get('pool_size')\n"
    )
    got = [(r.line, r.why) for r in ckr.classified(f)]
    assert got == [(2, ckr.INPUT_EDGE[("replay/stock.py", "analyse_stock")]), (5, None)]


def test_the_package_reads_no_stage_result_by_string() -> None:
    """Every stage's result is read typed: a renamed field fails in mypy, not in prose."""
    files = sorted((ROOT / "kvforensics").rglob("*.py"))
    left = {str(p.relative_to(ROOT)): lines for p in files
            if (lines := [r.line for r in ckr.classified(p) if r.why is None])}  # fmt: skip
    assert left == {}
