"""Benchmark reading large logs: ``replay`` (streamed: every logged round re-run under
``prefix``) and the streamed rebuild (``rounds -o``), each next to ``grep -c add_one_req``
over the same file in the same run, with CPU seconds and peak RSS (``/usr/bin/time``), at
several log sizes to show whether memory grows.

    .venv/bin/python scripts/bench_replay.py --sizes 100,500,1000,2000 [--dir /tmp/x] [--keep]

Logs are made under --dir (default /tmp) by scripts/make_large_log.py (an existing
``bench-<MB>mb.log`` there is reused) and removed after unless --keep. ``--no-rounds``
skips ``rounds -o``; ``--replay-max-mb`` skips ``replay`` above a size.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def timed(cmd: list[str], timeout: float) -> dict:
    """Wall and CPU seconds and peak RSS of ``cmd`` (GNU time's -v report)."""
    out = subprocess.run(
        ["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    rep = out.stderr

    def field(name: str) -> float:
        m = re.search(rf"{re.escape(name)}: ([\d.:]+)", rep)
        return _seconds(m.group(1)) if m else float("nan")

    return {
        "rc": out.returncode,
        "wall_s": round(field("Elapsed (wall clock) time (h:mm:ss or m:ss)"), 2),
        "cpu_s": round(field("User time (seconds)") + field("System time (seconds)"), 2),
        "peak_rss_mb": round(field("Maximum resident set size (kbytes)") / 1024),
        "stdout": out.stdout[-300:],
        "stdout_full": out.stdout,
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


def _seconds(text: str) -> float:
    parts = [float(p) for p in text.split(":")]
    return sum(p * 60**i for i, p in enumerate(reversed(parts)))


def bench(
    mb: int, workdir: Path, replay_max_mb: float, keep: bool, timeout: float, rounds: bool
) -> dict:
    log = workdir / f"bench-{mb}mb.log"
    if not log.exists():
        subprocess.run(
            [PY, str(ROOT / "scripts" / "make_large_log.py"), str(log), "--mb", str(mb)],
            check=True,
            cwd=ROOT,
        )
    size = log.stat().st_size / 1e6
    row: dict = {"log_mb": round(size), "file": str(log)}
    row["grep"] = timed(["grep", "-c", "add_one_req", str(log)], timeout)
    if rounds:
        out = workdir / f"bench-{mb}mb.ndjson"
        row["rounds_o"] = timed(
            [PY, "-m", "kvforensics", "rounds", str(log), "-o", str(out), "--no-progress"],
            timeout,
        )
        out.unlink(missing_ok=True)
    if size <= replay_max_mb:
        rp = timed([PY, "-m", "kvforensics", "replay", str(log), "--format", "json"], timeout)
        row["replay"] = rp
        rp.update(_replayed(rp.pop("stdout_full")))
        rp["stdout"] = ""
    g, gc = row["grep"]["wall_s"] or 0.01, row["grep"]["cpu_s"] or 0.01
    for k in ("rounds_o", "replay"):
        if k in row:
            row[k]["x_grep_wall"] = round(row[k]["wall_s"] / g, 1)
            row[k]["x_grep_cpu"] = round(row[k]["cpu_s"] / gc, 1)
    if not keep:
        log.unlink(missing_ok=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,500,1000,2000", help="log sizes in MB")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--replay-max-mb", type=float, default=float("inf"))
    ap.add_argument("--no-rounds", action="store_true", help="skip rounds -o")
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--keep", action="store_true", help="keep the generated logs")
    args = ap.parse_args()
    rows = []
    for s in args.sizes.split(","):
        rows.append(
            bench(int(s), args.dir, args.replay_max_mb, args.keep, args.timeout, not args.no_rounds)
        )
        print(json.dumps(rows[-1]), flush=True)
    print(f"{'log MB':>7} {'grep wall/cpu s':>16} | {'replay wall/cpu s':>18} {'x grep wall/cpu':>16} "
          f"{'peak MB':>8} {'rounds re-run':>14} | {'rounds -o cpu s':>16} {'peak MB':>8}")  # fmt: skip
    for r in rows:
        gr, rp, ro = r["grep"], r.get("replay"), r.get("rounds_o")
        rep = (
            f"{rp['wall_s']:>9}/{rp['cpu_s']:<8} {rp['x_grep_wall']:>7}/{rp['x_grep_cpu']:<8} "
            f"{rp['peak_rss_mb']:>8} {rp.get('logged_rounds_rerun')!s:>14}"
            if rp
            else f"{'(not run)':>58}"
        )
        rnd = f"{ro['cpu_s']:>16} {ro['peak_rss_mb']:>8}" if ro else f"{'(not run)':>25}"
        print(f"{r['log_mb']:>7} {gr['wall_s']:>7}/{gr['cpu_s']:<8} | {rep} | {rnd}")


if __name__ == "__main__":
    main()
