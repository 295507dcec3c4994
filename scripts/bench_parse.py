"""Benchmark `kvforensics parse` on a generated scheduler log (default 1 GB).

Reports the throughput of field extraction alone and of `kvforensics parse` (extraction
plus the Parquet writer), each one's peak RSS (child processes) and CPU time, and the time
of `grep -c` over the same file, as a ratio. The log lives in a temp dir that is
deleted afterwards.

    python scripts/bench_parse.py [--size-mb 1024] [--keep-output]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BLOCK_LINES = 50_000

# Streams the file through the reader and only counts events: the cost of extracting every
# typed field, without the output writer.
EXTRACT_ONLY = """
import json, resource, sys
from kvforensics.logs import ParseSummary, iter_events
n = 0
for df in iter_events([sys.argv[1]], ParseSummary()):
    n += df.height
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"events": n, "rss_mb": ru.ru_maxrss / 1024, "cpu_s": ru.ru_utime + ru.ru_stime}))
"""


def _block(rng: random.Random, start: int) -> str:
    """A realistic mix: the deciding rank's adder lines dominate, then AS writes,
    load-backs, batch lines, and lines nothing matches (HTTP access, other logging)."""
    out = []
    t = start
    for i in range(BLOCK_LINES):
        if i % 40 == 0:
            t += 1
        ts = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
        rid = f"as-{rng.getrandbits(40):010x}"
        r = rng.random()
        seq = rng.randint(1000, 200_000)
        pre = rng.randint(0, seq // 64) * 64
        if r < 0.35:
            out.append(
                f"[{ts} PP0] PrefillAdder.add_one_req: rid={rid}, seq_len={seq}, prefix_len={pre}, "
                f"host_hit_len={rng.randint(0, 2000) * 64}, rem_chunk_tokens={rng.randint(0, 16384)}, "
                f"local rem total: {rng.randint(-5000, 300000)}, current rem_total_tokens: "
                f"{rng.randint(-5000, 300000)}, cur_rem_tokens: {rng.randint(-5000, 300000)}"
            )
        elif r < 0.65:
            d = rng.choice(["full", "truncated", "rejected"])
            ext = "" if d == "rejected" else f", extend=[{pre}, {seq})"
            res = rng.choice(["CONTINUE", "NO_TOKEN", "OTHER"])
            out.append(
                f"[{ts} PP0] PrefillAdder.add_one_req result: rid={rid}, decision={d}{ext}, result={res}"
            )
        elif r < 0.75:
            out.append(
                f"[{ts} PP0] AttentionStore write: rid={rid}, blocks={seq // 256}, block_size=256"
            )
        elif r < 0.80:
            h = rng.randint(0, 2000) * 64
            out.append(f"[{ts} PP0] HiCache load back: rid={rid}, host_hit_len={h}, loaded={h}")
        elif r < 0.88:
            out.append(
                f"[{ts} PP3] Prefill batch, #new-seq: {rng.randint(1, 9)}, #new-token: {rng.randint(1, 16384)}, "
                f"#cached-token: {pre}, token usage: {rng.random():.2f}, #running-req: 0, "
                f"#queue-req: {rng.randint(0, 90)}, #prealloc-req: 0, #inflight-req: {rng.randint(0, 30)}, "
                f"input throughput (token/s): {rng.random() * 30000:.2f}, cuda graph: False"
            )
        elif r < 0.90:
            out.append(
                f"[{ts} PP1] Replay planned admission: rids=[{rid}, as-{rng.getrandbits(40):010x}], "
                f"extend_tokens={rng.randint(1, 16384)}"
            )
        elif r < 0.95:
            out.append(
                f"INFO:     10.0.{rng.randint(0, 255)}.{rng.randint(0, 255)}:{rng.randint(1024, 65535)} "
                f'- "POST /generate HTTP/1.1" 200 OK'
            )
        else:
            out.append(
                f"[{ts} PP0] KV transfer done: rid={rid}, bootstrap_room={rng.getrandbits(60)}, "
                f"elapsed={rng.random():.4f}s"
            )
    return "\n".join(out) + "\n"


def generate(path: Path, size: int) -> int:
    rng = random.Random(7)
    blocks = [_block(rng, 1793603772 + 1250 * k).encode() for k in range(4)]
    written = 0
    with path.open("wb") as fh:
        k = 0
        while written < size:
            b = blocks[k % len(blocks)]
            fh.write(b)
            written += len(b)
            k += 1
    return written


def _timed(cmd: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode not in (0, 1):  # grep -c exits 1 on zero matches
        sys.exit(f"{cmd[0]} failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    return dt, p.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--out", default="parquet", choices=["parquet", "csv", "ndjson"])
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="kvf-bench-"))
    try:
        log = tmp / "scheduler.log"
        t0 = time.perf_counter()
        size = generate(log, args.size_mb << 20)
        print(f"generated {size / 1e6:.0f} MB in {time.perf_counter() - t0:.1f} s: {log}")
        # warm the page cache so both tools read from memory
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL)

        load = os.getloadavg()[0]
        grep_s, grep_out = _timed(["grep", "-c", "add_one_req", str(log)])
        out = tmp / f"events.{args.out}"
        cmd = [
            sys.executable,
            "-m",
            "kvforensics",
            "parse",
            str(log),
            "-o",
            str(out),
            "--no-progress",
        ]
        # Extraction alone (every field of every event, nothing written), in its own process.
        ext_s, ext_out = _timed([sys.executable, "-c", EXTRACT_ONLY, str(log)])
        ext = json.loads(ext_out.strip().splitlines()[-1])
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        parse_s, parse_out = _timed(cmd)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # children's max RSS: grep's is tiny, so this is the parser's
        rss_mb = after.ru_maxrss / 1024  # KiB on Linux
        cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        events = parse_out.split("->")[1].split("events")[0].strip() if "->" in parse_out else "?"

        print(
            f"grep -c add_one_req: {grep_s:6.2f} s  ({size / 1e6 / grep_s:7.0f} MB/s), "
            f"{grep_out.strip()} lines"
        )
        print(
            f"kvforensics parse:   {parse_s:6.2f} s  ({size / 1e6 / parse_s:7.0f} MB/s), "
            f"{events} events -> {args.out} ({out.stat().st_size / 1e6:.0f} MB)"
        )
        print(
            f"extraction only:     {ext_s:6.2f} s  ({size / 1e6 / ext_s:7.0f} MB/s), "
            f"{ext['events']} events, {ext['cpu_s']:.2f} CPU-s ({ext['cpu_s'] / (size / 1e9):.1f} CPU-s/GB), "
            f"peak RSS {ext['rss_mb']:.0f} MB, {ext_s / grep_s:.1f}x grep"
        )
        print(f"parse / grep time:   {parse_s / grep_s:6.2f}x")
        print(f"parser peak RSS:     {rss_mb:6.0f} MB")
        print(
            f"parser CPU time:     {cpu_s:6.2f} s on {os.cpu_count()} cores "
            f"({size / 1e6 / cpu_s:.0f} MB per CPU-second); load average before: {load:.1f}"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
