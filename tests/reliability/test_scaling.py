"""Work grows with the input, never faster: for logs damaged the ways real ones are (rids
reused or all one, long values, blocks of lines repeated, CRLF mixed in), twice the input
costs ``parse``, ``rounds`` and ``replay`` at most about twice the CPU (3x allowed, plus
a little for the timer and fixed costs, so a loaded machine does not make it flaky)."""

from __future__ import annotations

import re
import signal
import time
from itertools import cycle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import FIXTURES
from tests.reliability._run import run_cli

INCIDENT_PP0 = FIXTURES / "logs" / "incident" / "pp0.log"
RID = re.compile(rb"as-[a-z0-9]{10}")
#: CPU seconds allowed on top of 3x: process_time's resolution and each run's fixed costs
SLACK_S = 0.3
#: CPU seconds a run may take at all (each takes a few)
LIMIT_S = 30


def _reused(lines: list[bytes]) -> list[bytes]:
    names = cycle([b"as-a", b"as-b", b"as-a", b"as-c"])
    seen: dict[bytes, bytes] = {}
    return [RID.sub(lambda m: seen.setdefault(m[0], next(names)), ln) for ln in lines]


def _blocks(lines: list[bytes]) -> list[bytes]:
    return [ln for i in range(0, len(lines), 20) for ln in lines[i : i + 20] * 3]


DAMAGE = {
    "reused rids": _reused,
    "one rid": lambda lines: [RID.sub(b"as-same", ln) for ln in lines],
    "long values": lambda lines: [RID.sub(b"v" * 3000, ln) for ln in lines],
    "repeated blocks": _blocks,
    "crlf mix": lambda lines: [ln + b"\r" if i % 2 else ln for i, ln in enumerate(lines)],
}
COMMANDS = {
    "parse": lambda log, tmp: ("parse", log, "-o", tmp / f"{log.stem}.parquet"),
    "rounds": lambda log, tmp: ("rounds", log, "--format", "json"),
    "replay": lambda log, tmp: ("replay", log, "--jobs", "1"),
}


def _log(tmp, damage: str, lines: int):
    with INCIDENT_PP0.open("rb") as f:
        head = [next(f).rstrip(b"\n") for _ in range(lines)]
    path = tmp / f"{damage.replace(' ', '-')}-{lines}.log"
    path.write_bytes(b"\n".join(DAMAGE[damage](head)) + b"\n")
    return path


class OverCpu(Exception):
    """A run past ``LIMIT_S`` of CPU: main() reports it as an internal error (exit 70)."""


def _over(signum, frame):
    raise OverCpu(f"over {LIMIT_S} s of CPU")


def _cpu(args) -> float:
    """The least CPU of two runs in this process (every thread of it); a run that walks
    on for ever is stopped at ``LIMIT_S`` of CPU, and fails."""
    best = float("inf")
    old = signal.signal(signal.SIGPROF, _over)
    try:
        for _ in range(2):
            t0 = time.process_time()
            signal.setitimer(signal.ITIMER_PROF, LIMIT_S)
            out = run_cli(*args)
            signal.setitimer(signal.ITIMER_PROF, 0)
            best = min(best, time.process_time() - t0)
            assert out.code in (0, 3, 4), (args, out.stderr[-300:])
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)
    return best


@pytest.mark.slow
@settings(max_examples=5, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))  # fmt: skip
@given(damage=st.sampled_from(sorted(DAMAGE)), lines=st.sampled_from([1200, 2000]))
def test_twice_the_input_costs_at_most_about_twice_the_cpu(tmp_path_factory, damage, lines):
    tmp = tmp_path_factory.mktemp("scaling")
    small, big = _log(tmp, damage, lines), _log(tmp, damage, 2 * lines)
    run_cli("parse", small, "-o", tmp / "warm.parquet")  # imports, not the input's cost
    for name, args in COMMANDS.items():
        once, twice = _cpu(args(small, tmp)), _cpu(args(big, tmp))
        assert twice <= 3 * once + SLACK_S, (name, damage, lines, round(once, 2), round(twice, 2))
