"""One fuzz case run in this process under a time limit."""

from __future__ import annotations

import signal
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


def run_case(case: Case, tmp, limit: float = LIMIT_S) -> Result:
    before = snapshot(tmp)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    t0 = time.monotonic()
    try:
        out = run_cli(*case.argv, columns=80)
        code, text = out.code, out.stdout + out.stderr
    except RunTimeout:
        code, text = -1, ""
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    seconds = time.monotonic() - t0
    found = [] if code != -1 else [f"over {limit:.0f} s"]
    found += problems(case, code, text, tmp, before) if code != -1 else []
    return Result(case.describe(), case.argv[0], code, seconds, found)
