"""A line no scheduler writes (past the reader's carry limit) is a one-line error
naming where it is, not a read that takes gigabytes."""

from kvforensics.logs.reader import MAX_CARRY
from tests.conftest import FIXTURES
from tests.reliability._run import run_cli

LOG = FIXTURES / "logs" / "samples" / "incident-pp0.log"


def test_a_line_past_the_carry_limit_is_refused(tmp_path):
    assert MAX_CARRY <= 16 << 20  # what a worker under 1 GiB can read as one line
    log = tmp_path / "long.log"
    log.write_bytes(LOG.read_bytes() + b"[2026-11-02 15:16:30 PP0] " + b"x" * (MAX_CARRY + 1))
    r = run_cli("rounds", log)
    assert r.code == 2, r.stderr
    assert f"a line longer than {MAX_CARRY >> 20} MiB" in r.stderr and "\n" not in r.stderr.strip()
