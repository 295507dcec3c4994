"""Write a large fork-format PP0 log with the project's own generator, for the benchmarks.

    .venv/bin/python scripts/make_large_log.py OUT.log --mb 1024

The Mooncake traffic is run through the model once (``prefix``), then rendered again and
again with the clock moved on and the request ids made unique per copy, until the file
reaches the size asked for; the incident's rounds close it, so the log ends with the
out-of-memory. Every copy is the model's own output, so every round replays exactly.
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_incident_logs import (
    INCIDENT_START,
    TRAFFIC_START,
    incident_capture,
    next_round,
    traffic_capture,
)

from kvforensics.synth import Clock, pp0_lines, startup_lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--mb", type=float, default=1024, help="size to reach (MB)")
    ap.add_argument("--trace-limit", type=int, default=None, help="trace rows per copy")
    args = ap.parse_args()
    traffic, names = traffic_capture(args.trace_limit)
    incident = incident_capture(next_round(traffic))
    span = timedelta(seconds=int(traffic.rounds[-1].end) + 120)
    target = int(args.mb * 1e6)
    clock = Clock.at(TRAFFIC_START)
    copies = 0
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.writelines(line + "\n" for line in startup_lines(incident.cfg, "PP0"))
        while fh.tell() < target:
            copies += 1
            tag = f"-{copies:04d}"
            fh.writelines(
                line + "\n" for line in pp0_lines(traffic, clock, rid=lambda r, tag=tag: names(r) + tag)
            )
            clock = Clock(clock.start + span)
        start = max(clock.start, Clock.at(INCIDENT_START).start)
        fh.writelines(line + "\n" for line in pp0_lines(incident, Clock(start)))
        size = fh.tell()
    print(f"{args.out}: {size / 1e6:.0f} MB, {copies} copies of the traffic plus the incident")


if __name__ == "__main__":
    main()
