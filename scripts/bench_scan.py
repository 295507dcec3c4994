"""Benchmark `kvforensics scan` on a synthesized fleet: healthy agent-traffic nodes (PP0
and PP3 logs each, different seeds) and, with --incident, the shipped incident bundle.

Reports MB/s and rounds/s of the scan with 1 and 2 local workers and on Ray (a local Ray
started with --num-cpus 2, or --address), each as a ratio to 1 worker measured in the
same run, with CPU time and peak RSS (the largest process: the scan itself, or the
largest pool worker; Ray's workers are not children of this process and not measured).
The engines' nodes tables are compared: they must be equal.

    python scripts/bench_scan.py [--nodes 8] [--requests 3000] [--incident] [--no-ray]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RUN = """
import json, resource, sys, time
from kvforensics.scan import ScanOptions, scan
engine, jobs, address, out, *paths = sys.argv[1:]
t0 = time.perf_counter()
fleet = scan(paths, ScanOptions(), engine=engine, jobs=int(jobs) or None,
             address=address or None)
wall = time.perf_counter() - t0
fleet.nodes_frame().write_parquet(out)
me = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
t = fleet.totals()
print(json.dumps({
    "wall_s": wall, "bytes": t["bytes"], "rounds": t["rounds"], "failed": t["failed"],
    "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
    "rss_mb": max(me.ru_maxrss, kids.ru_maxrss) / 1024,
}))
"""


#: the reference: the same nodes through ``replay_logs`` alone (no whole-log pass), in order
REPLAY = """
import json, resource, sys, time
from pathlib import Path
from kvforensics.replay import ReplayOptions, replay_logs
from kvforensics.scan import discover
t0 = time.perf_counter()
for spec in discover(sys.argv[1:]).nodes:
    replay_logs([Path(f) for f in spec.files], ReplayOptions(["fixed"]))
me = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": time.perf_counter() - t0, "cpu_s": me.ru_utime + me.ru_stime,
                  "rss_mb": me.ru_maxrss / 1024}))
"""


def make_fleet(out: Path, nodes: int, requests: int, incident: bool) -> None:
    sys.path.insert(0, str(ROOT))
    from kvforensics.synth.agent import write_agent_node

    for i in range(nodes):
        write_agent_node(out / f"node-{i:03d}", seed=100 + i, requests=requests)
    if incident:
        shutil.copytree(ROOT / "fixtures" / "logs" / "incident", out / "incident")


def _run(cmd: list[str]) -> dict:
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(engine: str, jobs: int, address: str, fleet: Path, table: Path) -> dict:
    d = _run([sys.executable, "-c", RUN, engine, str(jobs), address, str(table), str(fleet)])
    d["mb_s"] = d["bytes"] / 1e6 / d["wall_s"]
    d["rounds_s"] = d["rounds"] / d["wall_s"]
    return d


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--requests", type=int, default=3000, help="requests per agent node")
    ap.add_argument("--incident", action="store_true", help="add the incident bundle")
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--address", default="", help="a running Ray cluster (default: local)")
    args = ap.parse_args(argv)
    import polars as pl

    tmp = Path(tempfile.mkdtemp(prefix="kvf-bench-scan-"))
    try:
        t0 = time.perf_counter()
        make_fleet(tmp / "fleet", args.nodes, args.requests, args.incident)
        print(f"fleet: {args.nodes} agent node(s) in {time.perf_counter() - t0:.1f} s")
        runs = [("local", 1), ("local", 2)] + ([] if args.no_ray else [("ray", 0)])
        results, tables = {}, {}
        for engine, jobs in runs:
            name = f"{engine} x{jobs}" if jobs else engine
            results[name] = measure(engine, jobs, args.address, tmp / "fleet", tmp / "t.parquet")
            tables[name] = pl.read_parquet(tmp / "t.parquet")
        ref = results["local x1"]
        print(f"{ref['bytes'] / 1e6:.1f} MB, {ref['rounds']} rounds, {ref['failed']} failed")
        rep = _run([sys.executable, "-c", REPLAY, str(tmp / "fleet")])
        print(
            f"reference, replay alone node by node: {rep['wall_s']:.1f} s, {rep['cpu_s']:.1f} CPU s, "
            f"peak RSS {rep['rss_mb']:.0f} MB; the scan in one process takes "
            f"{ref['cpu_s'] / rep['cpu_s']:.2f}x its CPU time"
        )
        print(
            "| engine | wall s | MB/s | rounds/s | vs 1 worker | CPU s | MB per CPU s | peak RSS MB |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, d in results.items():
            # Ray's workers run outside this process tree: their CPU and RSS are not seen
            cpu = "-" if name == "ray" else f"{d['cpu_s']:.1f}"
            per = "-" if name == "ray" else f"{d['bytes'] / 1e6 / d['cpu_s']:.1f}"
            rss = "driver " if name == "ray" else ""
            print(
                f"| {name} | {d['wall_s']:.1f} | {d['mb_s']:.2f} | {d['rounds_s']:.0f} | "
                f"{ref['wall_s'] / d['wall_s']:.2f}x | {cpu} | {per} | {rss}{d['rss_mb']:.0f} |"
            )
        same = all(t.equals(tables["local x1"]) for t in tables.values())
        print(f"nodes tables equal across engines: {same}")
        if not same:
            raise SystemExit(1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
