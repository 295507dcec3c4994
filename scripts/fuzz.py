"""The long fuzz run: hostile inputs for every command (tests/fuzz/_cases.py), run in a
pool of worker processes, each case in-process (no interpreter start per run).

A run fails on exit 70, a traceback, a changed input, a stray or half-written file,
more than 30 s, or a worker's peak RSS over 1 GiB (a worker's peak bounds every run it
made). Prints the count per command and exit code, the slowest runs and every failure.

    PYTHONPATH=. python scripts/fuzz.py --runs 10000 --workers 2 --seed 1
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RSS_LIMIT_KB = 1 << 20  # 1 GiB
HARD_LIMIT_S = 60  # a worker silent this long is killed (the in-process alarm is 30 s)


def _worker(conn, seed_dir: str) -> None:
    # everything a command imports, before the first case's 30 s alarm is armed
    import kvforensics.cli
    import kvforensics.report.figures
    from tests.fuzz._cases import make_case
    from tests.fuzz._runner import run_case

    kvforensics.cli.app  # noqa: B018

    ledgers = {p.suffix: p for p in Path(seed_dir).glob("seed-ledger.*")}
    while True:
        job = conn.recv()
        if job is None:
            return
        rng = random.Random(job)
        with tempfile.TemporaryDirectory(prefix="kvf-fuzz-") as d:
            case = make_case(rng, Path(d), ledgers)
            r = run_case(case, Path(d))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        conn.send((job, r.command, r.code, r.seconds, r.problems, r.case, rss))


class Pool:
    def __init__(self, n: int, seed_dir: str) -> None:
        self.seed_dir = seed_dir
        self.slots = [self._start() for _ in range(n)]

    def _start(self):
        # spawn, not fork: the parent has polars' thread pool running, and a forked
        # child can inherit one of its locks held
        ctx = mp.get_context("spawn")
        a, b = ctx.Pipe()
        p = ctx.Process(target=_worker, args=(b, self.seed_dir), daemon=True)
        p.start()
        return [p, a, None, 0.0]  # process, pipe, job, started

    def run(self, jobs, on_result) -> None:
        jobs = collections.deque(jobs)
        while jobs or any(s[2] is not None for s in self.slots):
            for s in self.slots:
                if s[2] is None and jobs:
                    s[2], s[3] = jobs.popleft(), time.monotonic()
                    s[1].send(s[2])
            for i, s in enumerate(self.slots):
                if s[2] is None:
                    continue
                if s[1].poll(0.01):
                    on_result(s[1].recv())
                    s[2] = None
                elif time.monotonic() - s[3] > HARD_LIMIT_S or not s[0].is_alive():
                    on_result(
                        (
                            s[2],
                            "?",
                            -1,
                            time.monotonic() - s[3],
                            ["worker hung or died"],
                            f"seed {s[2]}",
                            0,
                        )
                    )
                    s[0].kill()
                    self.slots[i] = self._start()

    def close(self) -> None:
        for s in self.slots:
            s[1].send(None)
            s[0].join(5)


class Tally:
    def __init__(self) -> None:
        self.codes = collections.Counter()
        self.failures: list[dict] = []
        self.slowest: list[tuple[float, str]] = []
        self.max_rss = 0
        self.n = 0
        self.t0 = time.monotonic()
        self.checkpoint: Path | None = None

    def __call__(self, res) -> None:
        job, cmd, code, secs, found, case, rss = res
        self.n += 1
        self.codes[(cmd, code)] += 1
        self.max_rss = max(self.max_rss, rss)
        if rss > RSS_LIMIT_KB:
            found = [*found, f"worker peak RSS {rss >> 10} MiB"]
        if found:
            self.failures.append({"seed": job, "case": case, "code": code, "problems": found})
            print(f"FAIL seed {job} exit {code}: {found} :: {case[:300]}", file=sys.stderr)
        self.slowest = sorted([*self.slowest, (secs, case)], reverse=True)[:5]
        if self.n % 500 == 0:
            print(f"{self.n} runs, {len(self.failures)} failure(s)", file=sys.stderr, flush=True)
            if self.checkpoint:
                self.checkpoint.write_text(json.dumps(summary(self, time.monotonic() - self.t0)))


def summary(tally: Tally, wall: float) -> dict:
    by_cmd: dict[str, dict[str, int]] = collections.defaultdict(dict)
    for (cmd, code), n in sorted(tally.codes.items()):
        by_cmd[cmd][str(code)] = n
    return {
        "runs": tally.n,
        "wall_s": round(wall),
        "max_worker_rss_mib": tally.max_rss >> 10,
        "slowest_s": [round(s, 1) for s, _ in tally.slowest],
        "codes": dict(by_cmd),
        "failures": tally.failures,
    }


def report(tally: Tally, wall: float, path: Path | None) -> None:
    d = summary(tally, wall)
    print(f"{d['runs']} runs in {d['wall_s']} s; max worker RSS {d['max_worker_rss_mib']} MiB")
    for cmd, codes in d["codes"].items():
        print(f"  {cmd:9} " + ", ".join(f"exit {c}: {n}" for c, n in codes.items()))
    print("slowest: " + "; ".join(f"{s:.1f} s {c[:70]}" for s, c in tally.slowest))
    print(f"{len(tally.failures)} failure(s)")
    for f in tally.failures[:50]:
        print(f"  seed {f['seed']} exit {f['code']}: {f['problems']} :: {f['case'][:200]}")
    if path:
        path.write_text(json.dumps(d, indent=1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path, help="write the tally here")
    args = ap.parse_args()

    from tests.fuzz._cases import make_ledgers

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kvf-fuzz-seed-") as seed_dir:
        make_ledgers(Path(seed_dir))
        tally = Tally()
        tally.checkpoint = args.json
        pool = Pool(args.workers, seed_dir)
        base = args.seed * 1_000_003
        pool.run(range(base, base + args.runs), tally)
        pool.close()
    report(tally, time.monotonic() - t0, args.json)
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
