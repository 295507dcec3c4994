"""Fleet scan: many nodes' logs, each through the same rebuild, fidelity check and causes
as ``replay``, plus the whole-log findings (gap admissions, margins, what a fix refuses)."""

from typing import Any

from kvforensics.replay.whole_log import GapAdmission, Margin, Refusal, WholeLog, whole_log
from kvforensics.scan.discover import Discovery, discover
from kvforensics.scan.engines import ENGINES, run_tasks
from kvforensics.scan.fleet import Fleet, scan, write_parquet
from kvforensics.scan.records import NodeScan, NodeSpec
from kvforensics.scan.task import ScanOptions, scan_node


def whole_log_dict(wl: WholeLog) -> dict[str, Any]:
    return wl.as_dict()


__all__ = [
    "ENGINES",
    "Discovery",
    "Fleet",
    "GapAdmission",
    "Margin",
    "NodeScan",
    "NodeSpec",
    "Refusal",
    "ScanOptions",
    "WholeLog",
    "discover",
    "run_tasks",
    "scan",
    "scan_node",
    "whole_log",
    "whole_log_dict",
    "write_parquet",
]
