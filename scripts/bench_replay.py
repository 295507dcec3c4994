"""Benchmark reading large logs: the streamed rebuild (``rounds -o``) and ``replay``, each
next to ``grep -c add_one_req`` over the same file in the same run, with CPU seconds and
peak RSS (``/usr/bin/time``), at several log sizes to show whether memory grows.

    .venv/bin/python scripts/bench_replay.py --sizes 100,500,1000,2000 [--replay-max-mb 100]

Logs are made under --dir (default /tmp) by scripts/make_large_log.py and removed after
unless --keep. ``replay`` holds every event and round in memory (about 25x the log), so it
runs only on logs up to --replay-max-mb.
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
    }


def _seconds(text: str) -> float:
    parts = [float(p) for p in text.split(":")]
    return sum(p * 60**i for i, p in enumerate(reversed(parts)))


def bench(mb: int, workdir: Path, replay_max_mb: float, keep: bool, timeout: float) -> dict:
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
    out = workdir / f"bench-{mb}mb.ndjson"
    row["rounds_o"] = timed(
        [PY, "-m", "kvforensics", "rounds", str(log), "-o", str(out), "--no-progress"], timeout
    )
    out.unlink(missing_ok=True)
    if size <= replay_max_mb:
        row["replay"] = timed(
            [PY, "-m", "kvforensics", "replay", str(log), "--format", "json"], timeout
        )
        row["replay"]["stdout"] = ""
    g = row["grep"]["wall_s"] or 0.01
    for k in ("rounds_o", "replay"):
        if k in row:
            row[k]["x_grep_wall"] = round(row[k]["wall_s"] / g, 1)
    if not keep:
        log.unlink(missing_ok=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,500,1000,2000", help="log sizes in MB")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--replay-max-mb", type=float, default=100.0)
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--keep", action="store_true", help="keep the generated logs")
    args = ap.parse_args()
    rows = [
        bench(int(s), args.dir, args.replay_max_mb, args.keep, args.timeout)
        for s in args.sizes.split(",")
    ]
    print(f"{'log MB':>7} {'grep s':>7} | {'rounds -o wall/cpu s':>21} {'x grep':>7} "
          f"{'peak MB':>8} | {'replay wall/cpu s':>18} {'peak MB':>8}")  # fmt: skip
    for r in rows:
        ro, rp = r["rounds_o"], r.get("replay")
        rep = f"{rp['wall_s']:>8}/{rp['cpu_s']:<9} {rp['peak_rss_mb']:>8}" if rp else "  (not run)"
        print(
            f"{r['log_mb']:>7} {r['grep']['wall_s']:>7} | {ro['wall_s']:>10}/{ro['cpu_s']:<10} "
            f"{ro['x_grep_wall']:>7} {ro['peak_rss_mb']:>8} | {rep}"
        )
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
