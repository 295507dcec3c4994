"""The long fuzz run: hostile inputs for every command (tests/fuzz/_cases.py), run in a
pool of worker processes, each case in-process (no interpreter start per run).

A run fails on exit 70 or an undocumented exit code, a traceback or a panic, a changed
input, a stray or half-written file, a file created by a failed run, a file left in the
temporary directory, more than 30 s, or a peak RSS over 1 GiB. The peak is each case's
own: the worker resets its high-water mark before every case, and a worker that passes
1 GiB (seen by the parent, which kills it at once, or by the worker after the case) or
times out is replaced, so what it kept cannot weigh on the cases after it. Prints the
count per command and exit code, the slowest and largest runs and every failure.

    PYTHONPATH=. python scripts/fuzz.py --runs 10000 --workers 2 --seed 1
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fuzz._pool import Pool


class Tally:
    def __init__(self) -> None:
        self.codes = collections.Counter()
        self.failures: list[dict] = []
        self.slowest: list[tuple[float, str]] = []
        self.largest: list[tuple[int, str]] = []
        self.seconds = 0.0
        #: command -> (slowest seconds, largest peak RSS in KiB)
        self.worst: dict[str, tuple[float, int]] = {}
        self.n = 0
        self.t0 = time.monotonic()
        self.checkpoint: Path | None = None

    def __call__(self, res) -> None:
        job, cmd, code, secs, found, case, rss = res
        self.n += 1
        self.seconds += secs
        self.codes[(cmd, code)] += 1
        t, r = self.worst.get(cmd, (0.0, 0))
        self.worst[cmd] = (max(t, secs), max(r, rss))
        if found:
            self.failures.append({"seed": job, "case": case, "code": code, "problems": found})
            print(f"FAIL seed {job} exit {code}: {found} :: {case[:300]}", file=sys.stderr)
        self.slowest = sorted([*self.slowest, (secs, case)], reverse=True)[:5]
        self.largest = sorted([*self.largest, (rss, case)], reverse=True)[:5]
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
        "mean_run_s": round(tally.seconds / max(tally.n, 1), 2),
        "max_case_rss_mib": tally.largest[0][0] >> 10 if tally.largest else 0,
        "largest": [[r >> 10, c[:200]] for r, c in tally.largest],
        "slowest": [[round(s, 1), c[:200]] for s, c in tally.slowest],
        "codes": dict(by_cmd),
        "worst_by_command": {
            c: [round(t, 1), r >> 10] for c, (t, r) in sorted(tally.worst.items())
        },
        "failures": tally.failures,
    }


def report(tally: Tally, wall: float, path: Path | None, restarts: int) -> None:
    d = summary(tally, wall)
    print(
        f"{d['runs']} runs in {d['wall_s']} s ({d['mean_run_s']} s a run in a worker); "
        f"largest case peak RSS {d['max_case_rss_mib']} MiB; {restarts} worker(s) replaced"
    )
    for cmd, codes in d["codes"].items():
        print(f"  {cmd:9} " + ", ".join(f"exit {c}: {n}" for c, n in codes.items()))
    print(
        "worst per command (s, MiB): "
        + ", ".join(f"{c} {t}/{r}" for c, (t, r) in d["worst_by_command"].items())
    )
    print("slowest: " + "; ".join(f"{s:.1f} s {c[:70]}" for s, c in tally.slowest))
    print("largest: " + "; ".join(f"{r >> 10} MiB {c[:70]}" for r, c in tally.largest))
    print(f"{len(tally.failures)} failure(s)")
    for f in tally.failures[:50]:
        print(f"  seed {f['seed']} exit {f['code']}: {f['problems']} :: {f['case'][:200]}")
    if path:
        path.write_text(json.dumps(d, indent=1))


def _digest(root: Path) -> str:
    """One digest of every shipped fixture (a run must not change them either)."""
    h = hashlib.blake2b(digest_size=16)
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p).encode() + p.read_bytes())
    return h.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--first", type=int, help="run only this case (a seed a failure named)")
    ap.add_argument("--json", type=Path, help="write the tally here")
    ap.add_argument(
        "--minutes", type=float, help="start no case after this long (the runs done count)"
    )
    ap.add_argument(
        "--plain", action="store_true", help="cases as drawn before tests/fuzz/_hostile.py"
    )
    ap.add_argument(
        "--no-wide", action="store_true", help="cases as drawn before tests/fuzz/_wider.py"
    )
    args = ap.parse_args()

    from tests.conftest import FIXTURES
    from tests.fuzz._cases import make_ledgers

    t0 = time.monotonic()
    fixtures = _digest(FIXTURES)
    with tempfile.TemporaryDirectory(prefix="kvf-fuzz-seed-") as root:
        make_ledgers(Path(root))
        tally = Tally()
        tally.checkpoint = args.json
        (Path(root) / "cases").mkdir()
        pool = Pool(
            args.workers,
            Path(root),
            args=(root, str(Path(root) / "cases"), not args.plain, not (args.plain or args.no_wide)),
        )
        base = args.seed * 1_000_003 if args.first is None else args.first
        try:
            deadline = t0 + 60 * args.minutes if args.minutes else None
            pool.run(range(base, base + args.runs), tally, deadline)
        finally:
            pool.close()
    if _digest(FIXTURES) != fixtures:
        tally.failures.append({"seed": None, "case": "-", "code": 0,
                               "problems": ["the shipped fixtures changed"]})  # fmt: skip
    report(tally, time.monotonic() - t0, args.json, pool.restarts)
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
