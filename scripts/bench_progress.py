"""What the progress display costs a replay: the same log replayed with the stages drawn
(on a terminal console writing to /dev/null) and without, alternately, in one process.

    PYTHONPATH=. python scripts/bench_progress.py LOG [--runs 3]

Prints CPU and wall seconds of each run and the ratio of the medians (drawn / not).
Make the log with ``scripts/make_large_log.py LOG --mb 20``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from rich.console import Console

from kvforensics.progress import Stages
from kvforensics.replay import ReplayOptions, replay_logs

POLICIES = ["fixed", "upstream", "drain", "park"]


def once(log: Path, drawn: bool) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one replay, as ``kvforensics replay`` runs it."""
    with open(os.devnull, "w") as sink:
        console = Console(file=sink, force_terminal=True, width=100)
        cpu, wall = time.process_time(), time.perf_counter()
        with Stages(console, enabled=drawn):
            replay_logs([log], ReplayOptions(POLICIES, stream=True, whole_log=True))
        return time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("--runs", type=int, default=3, help="runs each way")
    args = ap.parse_args()
    once(args.log, False)  # imports and caches warmed before anything is timed
    got: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for i in range(args.runs):
        for drawn in (i % 2 == 0, i % 2 != 0):  # alternate which goes first
            got[drawn].append(once(args.log, drawn))
            cpu, wall = got[drawn][-1]
            print(f"progress {'on ' if drawn else 'off'}: {cpu:6.2f} CPU-s {wall:6.2f} s wall")
    for what, k in (("CPU", 0), ("wall", 1)):
        on = statistics.median(r[k] for r in got[True])
        off = statistics.median(r[k] for r in got[False])
        print(f"median {what}: on {on:.2f} s, off {off:.2f} s, ratio {on / off:.3f}")


if __name__ == "__main__":
    main()
