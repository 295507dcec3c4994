"""``replay --jobs N --engine ray``: the byte ranges as Ray tasks give what one pass gives."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import FIXTURES, ROOT

LOG = FIXTURES / "logs" / "clean" / "pp0.log"


def _cli(*args: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "kvforensics", *map(str, args)],
        capture_output=True, timeout=600, cwd=ROOT,
    )  # fmt: skip


@pytest.mark.ray
def test_ray_ranges_give_what_one_pass_gives() -> None:
    """CI starts a local Ray (``ray start --head --num-cpus 2``) and sets RAY_ADDRESS."""
    from kvforensics.model.profiles import FORK
    from kvforensics.replay import ranges

    opts = ranges.RangeOptions(overrides={}, rank=None, formats=None, profile=FORK, whole=True)
    joined = ranges.run_ranges(LOG, 2, opts, engine="ray", margin=16 << 10)
    assert len(joined.results) == 2
    local = ranges.run_ranges(LOG, 2, opts, margin=16 << 10)
    assert joined.deltas == local.deltas
    got = [(r.as_dict(), sets) for r, sets in joined.rounds()]
    assert got == [(r.as_dict(), sets) for r, sets in local.rounds()]
    one = _cli("replay", LOG, "--jobs", 1, "--format", "json")
    on_ray = _cli("replay", LOG, "--jobs", 2, "--engine", "ray", "--format", "json")
    assert on_ray.returncode == one.returncode
    assert on_ray.stdout == one.stdout


def test_an_unknown_engine_is_an_input_error() -> None:
    got = _cli("replay", LOG, "--jobs", 2, "--engine", "spark")
    assert got.returncode == 2
    assert b"--engine spark: choose from local, ray" in got.stdout + got.stderr
