"""The long run's pool attributes each peak RSS to its own case and replaces a worker
that passed the limit or ran out of time, so the cases after it are measured afresh."""

import multiprocessing
import tempfile
import time
from pathlib import Path

from tests.fuzz._pool import Pool, serve

MIB = 1024
LIMIT_KB = 200 * MIB


def _probe_worker(conn, sys_tmp: str, limit_kb: int) -> None:
    """Job 1 holds 300 MiB for a while (over the limit), job 2 takes 150 MiB and gives
    it back (under it), job 3 ends as a timeout does (code -1), job 7 starts a process; the others take
    nothing."""

    def run_one(job: int, started):
        started("probe", f"job {job}")
        if job == 7:  # a command with processes of its own (scan --jobs 2)
            child = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))
            child.start()
            child.join()
        if job == 8:  # a case that leaves memory behind in the worker
            _KEPT.append(bytearray(150 << 20))
        held = bytearray((300 if job == 1 else 150 if job == 2 else 0) << 20)
        time.sleep(0.3 if job == 1 else 0)  # long enough for the parent to see it
        del held
        return "probe", -1 if job == 3 else 0, 0.0, [], f"job {job}"

    serve(conn, run_one, limit_kb)


_KEPT: list[bytearray] = []


def _run(jobs, resting_kb: int = LIMIT_KB):
    got = {}
    pool = Pool(
        1, Path(tempfile.mkdtemp(prefix="kvf-pool-")), target=_probe_worker, limit_kb=LIMIT_KB,
        resting_kb=resting_kb,
    )  # fmt: skip
    pool.run(jobs, lambda r: got.__setitem__(r[0], r))
    pool.close()
    return got, pool.restarts


def test_each_case_has_its_own_peak_and_a_worker_over_the_limit_is_replaced():
    got, restarts = _run([0, 1, 4, 2, 5, 3, 6, 7])
    assert sorted(got) == [0, 1, 2, 3, 4, 5, 6, 7]
    flagged = {j for j, r in got.items() if r[4]}
    assert flagged == {1}, {j: got[j][4] for j in flagged}
    assert got[1][6] > LIMIT_KB and "MiB" in got[1][4][0]
    assert got[2][6] > 150 * MIB
    # the peak of job 2 (or of job 1 before it) is not charged to the case after it
    for j in (0, 4, 5, 6, 7):
        assert got[j][6] < 100 * MIB, (j, got[j][6] >> 10)
    # replaced after job 1 (over the limit) and after job 3 (out of time)
    assert restarts == 2


def test_a_worker_resting_high_after_a_case_is_replaced():
    """What a case left allocated in its worker would count in the next case's peak; a
    command run on its own never carries it. Such a worker is replaced first."""
    got, restarts = _run([8, 0], resting_kb=100 * MIB)
    assert not got[8][4] and got[8][6] > 150 * MIB  # under the limit: no finding
    assert got[0][6] < 100 * MIB, got[0][6] >> 10  # measured in a fresh worker
    assert restarts == 1
