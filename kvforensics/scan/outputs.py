"""Where a scan writes: checked before any node is read, written only for a scan that
replayed at least one node (a failed run leaves nothing behind)."""

from __future__ import annotations

from pathlib import Path

from kvforensics.errors import InputError
from kvforensics.outputs import check_output
from kvforensics.scan.fleet import Fleet, gap_table_beside


def check_outputs(output: Path | None, report: Path | None, paths: list[str]) -> None:
    """The nodes table (and the gap admissions beside it) and the report folder, before
    any work; an input is never an output."""
    local = [Path(p) for p in paths if "://" not in p]
    if output:
        for target in gap_table_beside(output), output:
            check_output(target, local)
        if output.suffix != ".parquet":  # the tables are written as Parquet, whatever the name
            raise InputError(f"{output}: give a file ending in .parquet")
    if report:
        check_output(report, local, directory=True)


def write_outputs(
    fleet: Fleet, output: Path | None, report: Path | None, paths: list[str]
) -> list[Path]:
    """The files written, none when no node was scanned."""
    from kvforensics.scan import write_parquet

    if not fleet.summary().scanned:
        return []
    written = write_parquet(fleet, output, paths) if output else []
    if report:
        from kvforensics.scan.report import write_report

        written += write_report(fleet, report)
    return written
