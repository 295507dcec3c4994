"""A fleet scan: the discovered nodes' results and what could not be read, as tables
(polars), JSON and Parquet."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from kvforensics.errors import InputError
from kvforensics.outputs import atomic_write, check_not_input
from kvforensics.scan.discover import discover, is_url
from kvforensics.scan.engines import Progress, run_tasks
from kvforensics.scan.records import NodeScan
from kvforensics.scan.task import ScanOptions


@dataclass(frozen=True, slots=True, kw_only=True)
class Totals:
    """What a fleet scan found, counted over the nodes scanned."""

    nodes: int
    scanned: int
    failed: int
    unreadable_files: int
    bytes: int
    rounds: int
    ooms: int
    nodes_with_oom: int
    gap_admissions: int
    nodes_with_gap_admissions: int
    nodes_below_zero_margin: int
    refused: dict[str, int]  # policy -> requests it refuses
    fidelity_rounds: int
    mismatches: int
    contradictions: int

    def as_dict(self) -> dict[str, object]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class Fleet:
    nodes: tuple[NodeScan, ...]
    #: (path, reason) for paths that gave no file at all
    problems: tuple[tuple[str, str], ...]

    def unreadable(self) -> list[tuple[str, str]]:
        """Every file or path that could not be read, each once."""
        out = list(self.problems)
        for n in self.nodes:
            out.extend(n.unreadable)
        return out

    def nodes_frame(self) -> pl.DataFrame:
        return pl.DataFrame([_node_row(n) for n in self.nodes], schema=NODE_SCHEMA, orient="row")

    def gaps_frame(self) -> pl.DataFrame:
        rows = [{"node": n.node, **g} for n in self.nodes for g in n.as_dict()["gap_admissions"]]
        return pl.DataFrame(rows, schema=GAP_SCHEMA)

    def totals(self) -> dict[str, Any]:
        return self.summary().as_dict()

    def summary(self) -> Totals:
        """The fleet's counts, typed (``totals`` is their JSON)."""
        ok = [n for n in self.nodes if n.error is None]
        found = [n.whole_log for n in ok if n.whole_log is not None]
        refused: dict[str, int] = {}
        for wl in found:
            for p, rs in wl.refused.items():
                refused[p] = refused.get(p, 0) + len(rs)
        tightest = [wl.tightest() for wl in found]
        return Totals(
            nodes=len(self.nodes),
            scanned=len(ok),
            failed=len(self.nodes) - len(ok),
            unreadable_files=len(self.unreadable()),
            bytes=sum(n.bytes_read for n in ok),
            rounds=sum(n.rounds for n in ok),
            ooms=sum(len(n.ooms) for n in ok),
            nodes_with_oom=sum(1 for n in ok if n.ooms),
            gap_admissions=sum(len(wl.gap_admissions) for wl in found),
            nodes_with_gap_admissions=sum(1 for wl in found if wl.gap_admissions),
            nodes_below_zero_margin=sum(1 for t in tightest if t is not None and t.margin < 0),
            refused=refused,
            fidelity_rounds=sum(n.fidelity_rounds for n in ok),
            mismatches=sum(n.mismatches for n in ok),
            contradictions=sum(n.contradictions for n in ok),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "nodes": [n.as_dict() for n in self.nodes],
            "unreadable": [{"path": p, "reason": r} for p, r in self.problems],
            "totals": self.totals(),
        }


NODE_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "node": pl.Utf8,
    "files": pl.List(pl.Utf8),
    "error": pl.Utf8,
    "unreadable": pl.Int64,
    "bytes": pl.Int64,
    "rounds": pl.Int64,
    "logged_rounds": pl.Int64,
    "ooms": pl.Int64,
    "oom_round": pl.Int64,
    "oom_rid": pl.Utf8,
    "oom_reproduced": pl.Boolean,
    "oom_causes": pl.List(pl.Utf8),
    "gap_admissions": pl.Int64,
    "tightest_margin": pl.Int64,
    "tightest_margin_round": pl.Int64,
    "fixed_refused": pl.Int64,
    "fixed_max_delay_s": pl.Float64,
    "park_refused": pl.Int64,
    "park_max_delay_s": pl.Float64,
    "fidelity_rounds": pl.Int64,
    "mismatches": pl.Int64,
    "contradictions": pl.Int64,
    "exit_code": pl.Int64,
}
GAP_SCHEMA = {
    "node": pl.Utf8,
    "round": pl.Int64,
    "time": pl.Utf8,
    "victim_rid": pl.Utf8,
    "unreserved_tail": pl.Int64,
    "intruder_rid": pl.Utf8,
    "intruder_compute": pl.Int64,
    "intruder_load_back": pl.Int64,
    "rem_total_tokens": pl.Int64,
    "leftover_chunk_budget": pl.Int64,
}


def _node_row(n: NodeScan) -> dict[str, Any]:
    d = n.as_dict()
    oom = d["ooms"][0] if d["ooms"] else {}
    tight = d["tightest_margin"] or {}
    row = {
        "node": n.node,
        "files": list(n.files),
        "error": n.error,
        "unreadable": len(n.unreadable),
        "bytes": n.bytes_read,
        "rounds": n.rounds,
        "logged_rounds": n.logged_rounds,
        "ooms": len(n.ooms),
        "oom_round": oom.get("round"),
        "oom_rid": oom.get("rid"),
        "oom_reproduced": oom.get("reproduced"),
        "oom_causes": [c["id"] for c in oom.get("causes", [])],
        "gap_admissions": len(d["gap_admissions"]) if n.whole_log else None,
        "tightest_margin": tight.get("margin"),
        "tightest_margin_round": tight.get("round"),
        "fidelity_rounds": n.fidelity_rounds,
        "mismatches": n.mismatches,
        "contradictions": n.contradictions,
        "exit_code": n.exit_code,
    }
    for p in ("fixed", "park"):
        r = d["refused"].get(p)
        delays = [x["delay_s"] for x in r["delays"] if x["delay_s"] is not None] if r else []
        row[f"{p}_refused"] = r["requests"] if r else None
        row[f"{p}_max_delay_s"] = max(delays) if delays else None
    return row


def scan(
    paths: list[str],
    opts: ScanOptions,
    *,
    group_by: str = "dir",
    engine: str = "local",
    jobs: int | None = None,
    address: str | None = None,
    on_done: Progress | None = None,
    on_start: Callable[[int], object] | None = None,
) -> Fleet:
    found = discover(paths, group_by)
    if not found.nodes:
        first = found.problems[0] if found.problems else ("", "nothing given")
        raise InputError(f"no log file to scan: {first[0]}: {first[1]}")
    if on_start:
        on_start(len(found.nodes))
    results = run_tasks(
        found.nodes, opts, engine=engine, jobs=jobs, address=address, on_done=on_done
    )
    return Fleet(tuple(results), found.problems)


def write_parquet(fleet: Fleet, out: Path, inputs: list[str]) -> list[Path]:
    """``out``: the nodes table; beside it ``<stem>.gap_admissions.parquet``. Each file is
    written to a temporary name in its folder and renamed (never half a file)."""
    gaps = gap_table_beside(out)
    given = [Path(p) for p in inputs_of(fleet, inputs)]
    for target in (out, gaps):
        check_not_input(target, given)
    nodes = fleet.nodes_frame()
    atomic_write(out, nodes.write_parquet)
    atomic_write(gaps, fleet.gaps_frame().write_parquet)
    return [out, gaps]


def gap_table_beside(out: Path) -> Path:
    """``fleet.parquet`` -> ``fleet.gap_admissions.parquet``."""
    return out.with_name(f"{out.stem}.gap_admissions{out.suffix or '.parquet'}")


def inputs_of(fleet: Fleet, given: list[str]) -> list[str]:
    """The local files a scan read (an output must not land on one of them)."""
    files = [p for n in fleet.nodes for p in n.files] + list(given)
    return [p for p in files if not is_url(p)]
