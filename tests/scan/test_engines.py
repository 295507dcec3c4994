"""Every engine runs the same per-node task and gives the same tables."""

import os
import sys

import pytest

from kvforensics.errors import InputError
from kvforensics.scan import ScanOptions, scan


@pytest.fixture(scope="module")
def in_process(fleet_dir):
    return scan([str(fleet_dir)], ScanOptions(), jobs=1)


def test_two_local_workers_give_the_same_tables(fleet_dir, in_process):
    pooled = scan([str(fleet_dir)], ScanOptions(), jobs=2)
    assert pooled.nodes == in_process.nodes
    assert pooled.nodes_frame().equals(in_process.nodes_frame())
    assert pooled.gaps_frame().equals(in_process.gaps_frame())


def test_bad_engine_and_jobs_are_input_errors(fleet_dir):
    with pytest.raises(InputError, match="--engine spark: choose from local, ray"):
        scan([str(fleet_dir)], ScanOptions(), engine="spark")
    with pytest.raises(InputError, match="--jobs 0"):
        scan([str(fleet_dir)], ScanOptions(), jobs=0)


@pytest.mark.ray
def test_ray_gives_the_same_tables(fleet_dir, in_process):
    """CI starts a local Ray (``ray start --head --num-cpus 2``) and sets RAY_ADDRESS."""
    on_ray = scan(
        [str(fleet_dir)], ScanOptions(), engine="ray", address=os.environ.get("RAY_ADDRESS")
    )
    assert on_ray.nodes == in_process.nodes
    assert on_ray.nodes_frame().equals(in_process.nodes_frame())
    assert on_ray.gaps_frame().equals(in_process.gaps_frame())


def test_the_ray_engine_without_ray_says_how_to_get_it(fleet_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(InputError, match=r"pip install 'kvforensics\[fleet\]'"):
        scan([str(fleet_dir / "clean")], ScanOptions(), engine="ray")
