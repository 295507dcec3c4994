"""Benchmark reading large logs: ``replay`` (streamed: every logged round re-run under
``prefix``) and the streamed rebuild (``rounds -o``), each next to ``grep -c add_one_req``
over the same file in the same run, with wall and CPU seconds and peak RSS
(``/usr/bin/time``), at several log sizes to show whether memory grows with the log.

    .venv/bin/python scripts/bench_replay.py --sizes 100,500,1000,2000 [--dir /tmp/x] [--keep]
    .venv/bin/python scripts/bench_replay.py --sizes 100 --no-rounds --jobs 1,2

``--jobs 1,2`` runs ``replay`` with one worker and with two (the log over two byte
ranges), side by side in the same run: each later run's wall and CPU (all its processes)
over the first's, and whether it printed the same bytes.

``--pure`` runs each replay a second time on the ``.py`` files (``KVF_PURE_PYTHON=1``)
right after the build installed (a compiled one: ``KVF_COMPILE=1``, setup.py): the
``pure`` rows' ``x first`` is then pure Python over the compiled build, and ``same`` says
whether both printed the same bytes.

Logs are made under --dir (default the temp dir) by scripts/make_large_log.py (an
existing ``bench-<MB>mb.log`` there is reused) and removed after unless --keep. The file
is read once before the runs so that every tool reads it from the page cache; grep runs
``--grep-runs`` times (its median is the reference: one run is near the timer's
resolution). ``--no-rounds`` skips ``rounds -o``; ``--replay-max-mb`` skips ``replay``
above a size. ``--floors`` also times the two stages every replay starts with, alone: the
reader's events (``read``) and the rounds rebuilt from them, kept by no one (``rebuild``):
what a replay costs before any round is re-run. The last lines are the table, the floors
and how peak RSS moved with the log's size.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
GIB_MB = 1024


def timed(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> dict:
    """Wall and CPU seconds and peak RSS of ``cmd`` (GNU time's -v report: its CPU takes in
    the child processes it waited for, its peak RSS only the largest process), and the
    peak of the RSS of all its processes together (sampled)."""
    with subprocess.Popen(
        ["/usr/bin/time", "-v", *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, cwd=ROOT, env=env,
    ) as proc:  # fmt: skip
        peak = TreeRss(proc.pid)
        peak.start()
        try:
            stdout, rep = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        finally:
            peak.stop()

    def field(name: str) -> float:
        m = re.search(rf"{re.escape(name)}: ([\d.:]+)", rep)
        return _seconds(m.group(1)) if m else float("nan")

    return {
        "rc": proc.returncode,
        "wall_s": round(field("Elapsed (wall clock) time (h:mm:ss or m:ss)"), 2),
        "cpu_s": round(field("User time (seconds)") + field("System time (seconds)"), 2),
        "peak_rss_mb": round(field("Maximum resident set size (kbytes)") / 1024),
        "peak_all_rss_mb": round(peak.peak / 2**20),
        "stdout_full": stdout,
        "stderr_tail": "" if proc.returncode == 0 else rep[-400:],
    }


class TreeRss(threading.Thread):
    """The largest sum of the RSS of a process and its descendants, read from ``/proc``
    five times a second (a replay with ``--jobs 2`` is two processes)."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root, self.peak, self._halt = root, 0, threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.2):
            self.peak = max(self.peak, _tree_rss(self.root))

    def stop(self) -> None:
        self._halt.set()
        self.join()


def _tree_rss(root: int) -> int:
    """Bytes resident in ``root`` and every process below it (0 where /proc is not)."""
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        proc = Path("/proc") / str(pid)
        try:
            total += int((proc / "statm").read_text().split()[1])
            todo += [int(c) for c in (proc / "task" / str(pid) / "children").read_text().split()]
        except (OSError, ValueError, IndexError):
            continue
    return total * os.sysconf("SC_PAGE_SIZE")


def _seconds(text: str) -> float:
    parts = [float(p) for p in text.split(":")]
    return sum(p * 60**i for i, p in enumerate(reversed(parts)))


#: the stages before any re-run, each alone in a fresh interpreter (``--floors``): the
#: reader's events; and the rounds rebuilt from them, handed to no one
FLOORS = {
    "read": (
        "import sys\n"
        "from kvforensics.logs import ParseSummary, iter_events\n"
        "n = sum(f.height for f in iter_events([sys.argv[1]], ParseSummary()))\n"
        "print(n)\n"
    ),
    "rebuild": (
        "import sys\n"
        "from pathlib import Path\n"
        "from kvforensics.rounds.stream import LogStream, forgetting\n"
        "ls = LogStream([Path(sys.argv[1])], need_adder=True)\n"
        "print(sum(1 for _ in forgetting(ls, ls)))\n"
    ),
}


def _replayed(stdout: str) -> dict:
    """What the replay says it did: rounds re-run, mismatches, the out-of-memory reproduced."""
    try:
        d = json.loads(stdout)
    except ValueError:
        return {"replayed": None}
    fid = d["fidelity"]
    return {
        "logged_rounds_rerun": fid["rounds_checked"],
        "rounds_rerun": d["whole_log"]["rounds_rerun"],
        "mismatches": len(fid["mismatches"]),
        "reproduced": d["reproduced"],
    }


def _grep(log: Path, runs: int, timeout: float) -> dict:
    """grep's median run (wall and CPU taken separately), and its count of lines."""
    got = [timed(["grep", "-c", "add_one_req", str(log)], timeout) for _ in range(runs)]
    return {
        "rc": got[0]["rc"],
        "wall_s": statistics.median(g["wall_s"] for g in got),
        "cpu_s": statistics.median(g["cpu_s"] for g in got),
        "peak_rss_mb": max(g["peak_rss_mb"] for g in got),
        "lines": got[0]["stdout_full"].strip(),
        "runs": runs,
    }


#: the environment of a run on the ``.py`` files, compiled build or not (``--pure``)
PURE_ENV = {**os.environ, "KVF_PURE_PYTHON": "1"}


def _build() -> str:
    """What ``kvforensics --version`` says runs (``compiled: ...`` or ``pure Python``)."""
    out = subprocess.run([PY, "-m", "kvforensics", "--version"], capture_output=True,
                         text=True, cwd=ROOT)  # fmt: skip
    return out.stdout.strip().rpartition("(")[2].rstrip(")")


def _make(log: Path, mb: int) -> None:
    if not log.exists():
        cmd = [PY, str(ROOT / "scripts" / "make_large_log.py"), str(log), "--mb", str(mb)]
        subprocess.run(cmd, check=True, cwd=ROOT)
    with log.open("rb") as fh:  # into the page cache, for grep and the tool alike
        while fh.read(16 << 20):
            pass


def bench(mb: int, workdir: Path, args: argparse.Namespace) -> dict:
    log = workdir / f"bench-{mb}mb.log"
    _make(log, mb)
    size = log.stat().st_size / 1e6
    row: dict = {"log_mb": round(size), "load_avg": round(os.getloadavg()[0], 1)}
    row["grep"] = _grep(log, args.grep_runs, args.timeout)
    if args.rounds:
        out = workdir / f"bench-{mb}mb.ndjson"
        cmd = [PY, "-m", "kvforensics", "rounds", str(log), "-o", str(out), "--no-progress"]
        row["rounds_o"] = timed(cmd, args.timeout)
        row["rounds_o"].pop("stdout_full")
        out.unlink(missing_ok=True)
    for name, code in FLOORS.items() if args.floors else ():
        row[name] = timed([PY, "-c", code, str(log)], args.timeout)
        row[name]["count"] = row[name].pop("stdout_full").strip()
    row["build"] = _build()
    builds = [("", None)] + ([(" pure", PURE_ENV)] if args.pure else [])
    for jobs in args.jobs.split(",") if size <= args.replay_max_mb else ():
        for build, env in builds:
            cmd = [PY, "-m", "kvforensics", "replay", str(log), "--format", "json", "--no-progress"]
            rp = timed(cmd + (["--jobs", jobs] if jobs != "default" else []), args.timeout, env)
            out = rp.pop("stdout_full")
            rp["stdout_sha256"] = hashlib.sha256(out.encode()).hexdigest()[:16]
            rp.update(_replayed(out))
            row[f"replay --jobs {jobs}{build}"] = rp
    _against_first(row)
    g, gc = row["grep"]["wall_s"] or 0.01, row["grep"]["cpu_s"] or 0.01
    for k in [k for k in row if k in ("rounds_o", *FLOORS) or k.startswith("replay")]:
        row[k]["x_grep_wall"] = round(row[k]["wall_s"] / g, 1)
        row[k]["x_grep_cpu"] = round(row[k]["cpu_s"] / gc, 1)
    if not args.keep:
        log.unlink(missing_ok=True)
    return row


def _against_first(row: dict) -> None:
    """Each replay's wall and CPU over the first one's (``--jobs 1,2``: two workers against
    one), and whether it printed the same bytes."""
    reps = [k for k in row if k.startswith("replay")]
    if not reps:
        return
    first = row[reps[0]]
    for k in reps:
        rp = row[k]
        rp["x_first_wall"] = round(rp["wall_s"] / (first["wall_s"] or 0.01), 2)
        rp["x_first_cpu"] = round(rp["cpu_s"] / (first["cpu_s"] or 0.01), 2)
        rp["same_output"] = rp["stdout_sha256"] == first["stdout_sha256"]
    row["load_avg_after"] = round(os.getloadavg()[0], 1)


def table(rows: list[dict]) -> None:
    print(f"{'log MB':>7} {'load':>5} {'grep wall/cpu s':>16} | {'replay':>14} {'wall/cpu s':>17} "
          f"{'x grep wall/cpu':>16} {'peak MB':>8} {'logged re-run':>14} "
          f"{'x first wall/cpu':>17} {'same':>5} | "
          f"{'rounds -o cpu s':>16} {'peak MB':>8}")  # fmt: skip
    for r in rows:
        gr, ro = r["grep"], r.get("rounds_o")
        rnd = f"{ro['cpu_s']:>16} {ro['peak_rss_mb']:>8}" if ro else f"{'(not run)':>25}"
        for k in [k for k in r if k.startswith("replay")] or [None]:
            rp = r.get(k)
            rep = (
                f"{k.removeprefix('replay '):>14} {rp['wall_s']:>8}/{rp['cpu_s']:<8} "
                f"{rp['x_grep_wall']:>7}/{rp['x_grep_cpu']:<8} {rp['peak_all_rss_mb']:>8} "
                f"{rp.get('logged_rounds_rerun')!s:>14} "
                f"{rp.get('x_first_wall')!s:>8}/{rp.get('x_first_cpu')!s:<8} "
                f"{rp.get('same_output')!s:>5}"
                if rp
                else f"{'(not run)':>97}"
            )
            print(f"{r['log_mb']:>7} {r['load_avg']:>5} {gr['wall_s']:>7}/{gr['cpu_s']:<8} | "
                  f"{rep} | {rnd}")  # fmt: skip


def floors(rows: list[dict]) -> None:
    """The stages before any re-run, against grep and against the replay (its last
    ``--jobs``): how much of the replay's wall the read and the rebuild alone take."""
    for r in rows:
        if "read" not in r:
            continue
        reps = [k for k in r if k.startswith("replay")]
        rp = r[reps[-1]] if reps else None
        parts = []
        for name in FLOORS:
            f = r[name]
            share = f", {f['wall_s'] / rp['wall_s']:.2f}x the replay's wall" if rp else ""
            parts.append(f"{name} {f['wall_s']}/{f['cpu_s']} s ({f['x_grep_wall']}x grep{share})")
        print(f"{r['log_mb']:>7} MB before any re-run: " + "; ".join(parts))


def rss_growth(rows: list[dict]) -> None:
    """How the peak RSS of the replay's processes together moved between the smallest and
    the largest log replayed (the last ``--jobs`` given)."""
    got = [
        (r["log_mb"], r[k]["peak_all_rss_mb"])
        for r in rows
        for k in [k for k in r if k.startswith("replay")][-1:]
    ]
    if len(got) < 2:
        return
    (m0, r0), (m1, r1) = min(got), max(got)
    per_gb = (r1 - r0) / ((m1 - m0) / 1000) if m1 > m0 else 0.0
    worst = max(r for _, r in got)
    print(
        f"peak RSS {r0} MB at {m0} MB of log, {r1} MB at {m1} MB: {per_gb:+.0f} MB per GB of "
        f"log; largest {worst} MB ({'within' if worst <= GIB_MB else 'over'} 1 GiB)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,500,1000,2000", help="log sizes in MB")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--replay-max-mb", type=float, default=float("inf"))
    ap.add_argument("--no-rounds", dest="rounds", action="store_false", help="skip rounds -o")
    ap.add_argument("--grep-runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--keep", action="store_true", help="keep the generated logs")
    ap.add_argument("--floors", action="store_true", help="time the read and the rebuild alone")
    ap.add_argument(
        "--pure", action="store_true",
        help="run each replay again on the .py files (KVF_PURE_PYTHON=1), next to the build",
    )  # fmt: skip
    ap.add_argument(
        "--jobs", default="default",
        help="replay's --jobs, one run each, comma-separated (default: the tool's own choice)",
    )  # fmt: skip
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for s in args.sizes.split(","):
        rows.append(bench(int(s), args.dir, args))
        print(json.dumps(rows[-1]), flush=True)
    table(rows)
    floors(rows)
    rss_growth(rows)


if __name__ == "__main__":
    main()
