"""One fuzz case run in this process under a time limit."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass

import kvforensics.cli  # noqa: F401  (imported here, not under a case's alarm)
from tests.fuzz._cases import Case, problems, snapshot
from tests.reliability._run import run_cli

#: a run over this is a finding (the inputs are a few kilobytes)
LIMIT_S = 30


class RunTimeout(BaseException):
    """Raised by the alarm; a BaseException so the CLI's handlers do not turn it into
    an ordinary error exit."""


@dataclass
class Result:
    case: str
    command: str
    code: int
    seconds: float
    problems: list[str]


def _alarm(signum, frame):
    raise RunTimeout


@contextlib.contextmanager
def _raw_output():
    """What the run writes past Python's streams, on file descriptors 1 and 2 (a Rust
    panic's message, a C library's warning, a fatal error's dump), as a list of one
    string once the block ends."""
    got: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as cap:
        os.dup2(cap.fileno(), 1)
        os.dup2(cap.fileno(), 2)
        try:
            yield got
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            cap.seek(0)
            got.append(cap.read().decode(errors="replace"))


def run_case(case: Case, tmp, limit: float = LIMIT_S) -> Result:
    before = snapshot(tmp)
    old = signal.signal(signal.SIGALRM, _alarm)
    t0 = time.monotonic()
    found: list[str] = []
    text = ""
    cwd = os.getcwd()
    os.chdir(tmp)  # a relative output path lands where the checker looks
    with _raw_output() as raw:
        try:
            # armed inside the try: an alarm during the capture's own setup is a time-out too
            signal.setitimer(signal.ITIMER_REAL, limit)
            out = run_cli(*case.argv, columns=80)
            code, text = out.code, out.stdout + out.stderr
        except RunTimeout:
            code, found = -1, [f"over {limit:.0f} s"]
        except Exception as exc:  # past main()'s own handlers: a bug of ours
            code, found = -2, [f"raised {type(exc).__name__}: {exc}"[:300]]
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
            os.chdir(cwd)
    seconds = time.monotonic() - t0
    if code != -1:
        found += problems(case, code, text, raw[0], tmp, before)
    return Result(case.describe(), case.argv[0], code, seconds, found)
