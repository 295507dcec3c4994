"""Which rank decides, and which files hold its lines."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from kvforensics.errors import InputError


def _ranks_by_file(events: pl.DataFrame) -> str:
    pairs = events.select("rank", "file").unique().sort("file", "rank").iter_rows()
    return ", ".join(f"{r or 'untagged'} in {f}" for r, f in pairs) or "no lines at all"


def deciding_rank(events: pl.DataFrame, rank: str | None) -> str:
    """The rank asked for (it must appear in the logs), else the first with adder lines,
    else the first rank of the logs at all ("" for lines without a rank tag)."""
    present = set(events["rank"].unique().to_list()) if events.height else set()
    if rank is not None:
        if rank not in present:
            raise InputError(
                f"--rank {rank}: no line of these logs is tagged {rank} "
                f"(they hold {_ranks_by_file(events)})"
            )
        return rank
    adder = events.filter(pl.col("kind") == "adder_check")["rank"].unique().to_list()
    if adder:
        return str(sorted(adder, key=str)[0])
    return str(sorted(present, key=str)[0]) if present else ""


def rank_files(events: pl.DataFrame, rank: str) -> list[str]:
    """The files that hold ``rank``'s lines, in reading order."""
    return events.filter(pl.col("rank") == rank)["file"].unique(maintain_order=True).to_list()


def describe_rank(events: pl.DataFrame, rank: str, names_only: bool = False) -> str:
    """``PP0 (logs/pp0.log)``; a log without rank tags is named by its files alone
    (``names_only``: file names without their folders)."""
    names = [Path(f).name if names_only else f for f in rank_files(events, rank)]
    files = ", ".join(names) or "no file"
    return f"{rank} ({files})" if rank else files
