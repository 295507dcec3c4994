"""``scan -o`` writes Parquet: a name that says another format is refused before any
work, and nothing is created."""

import pytest

from tests.conftest import FIXTURES
from tests.reliability._run import run_cli

LOG = FIXTURES / "logs" / "samples" / "incident-pp0.log"


@pytest.mark.parametrize("name", ["nodes.csv", "nodes", "nodes.json"])
def test_a_nodes_table_not_named_parquet_is_refused(tmp_path, name):
    out = tmp_path / name
    r = run_cli("scan", LOG, "--jobs", "1", "-o", out)
    assert r.code == 2 and ".parquet" in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_parquet_nodes_table_and_its_gaps_are_written(tmp_path):
    import polars as pl

    r = run_cli("scan", LOG, "--jobs", "1", "-o", tmp_path / "nodes.parquet")
    assert r.code == 0, r.stderr
    assert pl.read_parquet(tmp_path / "nodes.parquet").height == 1
    pl.read_parquet(tmp_path / "nodes.gap_admissions.parquet")


def test_a_scan_that_replays_no_node_writes_nothing(tmp_path):
    log = tmp_path / "decode.log"
    log.write_text("hello\n")
    out, rep = tmp_path / "new" / "nodes.parquet", tmp_path / "new" / "rep"
    r = run_cli("scan", log, "--jobs", "1", "-o", out, "--report", rep)
    assert r.code == 2 and "nothing written" in r.stderr, (r.code, r.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decode.log"]
