"""The pool the long fuzz run (scripts/fuzz.py) works in: one process per worker, each
running its cases in-process, with every case's own peak RSS, and a worker replaced
once it passes the RSS limit or times out, so what it kept cannot weigh on the cases
after it."""

from __future__ import annotations

import collections
import multiprocessing as mp
import os
import random
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

RSS_LIMIT_KB = 1 << 20  # 1 GiB
#: a worker resting above this after a case is replaced before the next: what earlier
#: cases left (allocator arenas, caches) would count in the next case's peak, which a
#: command run on its own never carries
RESTING_LIMIT_KB = 640 << 10
HARD_LIMIT_S = 60  # a worker silent this long is killed (the in-process alarm is 30 s)
_STATUS = re.compile(r"(VmHWM|VmRSS):\s+(\d+) kB")


def _memory(pid: int | str = "self") -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in KiB; empty once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return {k: int(v) for k, v in _STATUS.findall(text)}


def _reset_peak() -> None:
    # Linux: writing 5 sets the high-water mark back to the current RSS
    Path("/proc/self/clear_refs").write_text("5")


def _left_in(tmp: Path) -> list[str]:
    """What a case left in the temporary directory (removed, and reported); the directory
    itself gone is a finding too (made again for the next case)."""
    if not tmp.is_dir():
        tmp.mkdir(parents=True, exist_ok=True)
        return [f"the temporary directory {tmp.name} was removed"]
    left = sorted(p.name for p in tmp.iterdir())
    for p in tmp.iterdir():
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    return [f"left in the temporary directory: {left[:3]}"] if left else []


def serve(conn, run_one: Callable, limit_kb: int) -> None:
    """A worker's loop: for each job, ``run_one(job, started)`` gives (command, exit
    code, seconds, problems, case) and calls ``started(command, case)`` first; each
    result goes back with the case's own peak RSS. The worker ends itself after a case
    over ``limit_kb`` or over time (the parent starts another)."""
    while True:
        job = conn.recv()
        if job is None:
            return
        _reset_peak()
        res = run_one(job, lambda cmd, case, job=job: conn.send(("start", job, cmd, case)))
        rss = _memory().get("VmHWM", 0)
        conn.send(("done", job, *res, rss))
        if rss > limit_kb or res[1] == -1:
            return


def fuzz_worker(
    conn, seed_dir: str, cases_dir: str, hostile: bool, wide: bool, sys_tmp: str, limit_kb: int
) -> None:
    """A worker over make_case's cases."""
    # everything a command imports, before the first case's 30 s alarm is armed
    import kvforensics.cli
    import kvforensics.report.figures
    from tests.fuzz._cases import make_case
    from tests.fuzz._runner import run_case

    kvforensics.cli.app  # noqa: B018
    # the commands' own temporary files go here, where the worker can see what stays
    os.environ["TMPDIR"] = sys_tmp
    tempfile.tempdir = sys_tmp
    ledgers = {p.suffix: p for p in Path(seed_dir).glob("seed-ledger.*")}

    def run_one(job: int, started):
        with tempfile.TemporaryDirectory(prefix="kvf-fuzz-", dir=cases_dir) as d:
            case = make_case(random.Random(job), Path(d), ledgers, hostile=hostile, wide=wide)
            started(case.argv[0], case.describe())
            r = run_case(case, Path(d))
        return r.command, r.code, r.seconds, r.problems + _left_in(Path(sys_tmp)), r.case

    serve(conn, run_one, limit_kb)


class Pool:
    """``n`` workers running ``target(conn, *args, sys_tmp, limit_kb)``; under ``root``,
    each gets a temporary directory of its own."""

    def __init__(
        self, n: int, root: Path, args=(), target=fuzz_worker, limit_kb: int = RSS_LIMIT_KB,
        resting_kb: int = RESTING_LIMIT_KB,
    ) -> None:  # fmt: skip
        self.root, self.args, self.target, self.limit_kb = Path(root), args, target, limit_kb
        self.resting_kb = resting_kb
        self.slots = [self._start(i) for i in range(n)]
        self.restarts = 0

    def _start(self, i: int):
        # spawn, not fork: the parent has polars' thread pool running, and a forked
        # child can inherit one of its locks held
        ctx = mp.get_context("spawn")
        a, b = ctx.Pipe()
        # a directory of its own: what a killed worker left is not the next one's doing
        sys_tmp = Path(tempfile.mkdtemp(prefix=f"{i}-", dir=self.root))
        args = (b, *self.args, str(sys_tmp), self.limit_kb)
        # not a daemon: a command may start processes of its own (scan --jobs 2); the
        # parent ends its workers itself (close, or kill on the way out)
        p = ctx.Process(target=self.target, args=args)
        p.start()
        # process, pipe, job, started, (command, case) once the worker says
        return {"p": p, "pipe": a, "job": None, "t0": 0.0, "case": ("?", "?"), "i": i}

    def _replace(self, s) -> None:
        s["p"].kill()
        s["p"].join(5)
        self.slots[s["i"]] = self._start(s["i"])
        self.restarts += 1

    def _fail(self, s, why: str, rss: int, on_result) -> None:
        cmd, case = s["case"]
        secs = time.monotonic() - s["t0"]
        on_result((s["job"], cmd, -1, secs, [why], f"seed {s['job']}: {case}", rss))
        self._replace(s)

    def _poll(self, s, on_result) -> None:
        while s["job"] is not None and s["pipe"].poll(0.005):
            try:
                msg = s["pipe"].recv()
            except (EOFError, OSError):  # the worker died mid-message
                self._fail(s, f"worker died (exit {s['p'].exitcode})", 0, on_result)
                return
            if msg[0] == "start":
                s["case"] = msg[2:]
                continue
            job, cmd, code, secs, found, case, rss = msg[1:]
            if rss > self.limit_kb:
                found = [*found, f"peak RSS {rss >> 10} MiB: over {self.limit_kb >> 10} MiB"]
            on_result((job, cmd, code, secs, found, case, rss))
            s["job"] = None
            ending = rss > self.limit_kb or code == -1
            if ending:
                s["p"].join(5)  # it ends itself (killed if that takes longer)
            resting = _memory(s["p"].pid).get("VmRSS", 0) > self.resting_kb
            if ending or resting or not s["p"].is_alive():
                # never a next job for a worker on its way out: it would die holding it
                self._replace(s)
        if s["job"] is None:
            return
        rss = _memory(s["p"].pid).get("VmRSS", 0)
        if rss > self.limit_kb:
            self._fail(
                s, f"RSS {rss >> 10} MiB: over {self.limit_kb >> 10} MiB, killed", rss, on_result
            )
        elif time.monotonic() - s["t0"] > HARD_LIMIT_S:
            self._fail(s, f"silent for {HARD_LIMIT_S} s: killed", rss, on_result)
        elif not s["p"].is_alive():
            self._fail(s, f"worker died (exit {s['p'].exitcode})", rss, on_result)

    def run(self, jobs, on_result, deadline: float | None = None) -> None:
        """Every job, or (``deadline``, a ``time.monotonic()``) those started before it."""
        jobs = collections.deque(jobs)
        while jobs or any(s["job"] is not None for s in self.slots):
            if deadline is not None and time.monotonic() > deadline:
                jobs.clear()  # the ones running finish; no more start
            for s in list(self.slots):
                if s["job"] is None and jobs:
                    s["job"], s["t0"], s["case"] = jobs.popleft(), time.monotonic(), ("?", "?")
                    s["pipe"].send(s["job"])
                self._poll(s, on_result)

    def close(self) -> None:
        for s in self.slots:
            if s["p"].is_alive():
                s["pipe"].send(None)
            s["p"].join(5)
            s["p"].kill()
