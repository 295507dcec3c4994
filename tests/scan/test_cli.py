"""`kvforensics scan` and `replay`'s whole-log line, as a user runs them."""

import json

import polars as pl

from tests.incli import run


def cli(*args, columns=80):
    return run(*args, columns=columns)


def words(text: str) -> str:
    return " ".join(text.split())


def test_scan_table_json_and_parquet(fleet_dir, tmp_path):
    out = tmp_path / "fleet.parquet"
    # wide: the temporary paths in the text are longer than 80 columns
    r = cli("scan", fleet_dir, tmp_path / "missing.log", "--jobs", "1", "-o", out, columns=400)
    assert r.returncode == 0, r.stderr
    text = words(r.stdout)
    assert "as-1keim4u1e8" in text and "unreserved_tail" in text
    assert f"unreadable: {tmp_path / 'missing.log'}: no such file or directory" in text
    assert "4 of 4 node(s) scanned" in text
    assert pl.read_parquet(out).height == 4
    assert pl.read_parquet(tmp_path / "fleet.gap_admissions.parquet").height > 10
    j = cli("scan", fleet_dir / "incident", "--format", "json", "--jobs", "1")
    d = json.loads(j.stdout)
    (n,) = d["nodes"]
    assert n["gap_admissions"][0]["intruder_rid"] == "as-xpkq7d03n5"
    assert d["totals"]["ooms"] == 1


def test_scan_names_nodes_below_the_fleet_directory_at_any_width(fleet_dir):
    for columns in (80, 200):
        r = cli("scan", fleet_dir, "--jobs", "1", columns=columns)
        lines = r.stdout.splitlines()
        assert lines[0].strip() == f"Fleet scan of {fleet_dir}"
        starts = [line.split("│")[1].strip() for line in lines if line.startswith("│ ")]
        names = ("agent", "clean", "external", "incident")
        assert [s for s in starts if s in names] == list(names)
        assert all(len(line) <= columns for line in lines)


def test_scan_of_nothing_and_writing_over_an_input_are_one_line_errors(fleet_dir, tmp_path):
    r = cli("scan", tmp_path / "nothing-here")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"error: no log file to scan: {tmp_path / 'nothing-here'}: no such file or directory"
    ]
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "decode.log").write_text("hello\n")
    r = cli("scan", tmp_path / "x", "--jobs", "1")
    assert r.returncode == 2 and "not scanned" in r.stdout
    log = fleet_dir / "clean" / "pp0.log"
    before = log.read_bytes()
    r = cli("scan", log, "--jobs", "1", "-o", log)
    assert r.returncode == 2 and "it is one of the input files" in r.stderr
    assert log.read_bytes() == before


def test_replay_of_a_healthy_log_reports_its_gaps_and_margin(fleet_dir):
    r = cli("replay", *sorted((fleet_dir / "agent").glob("*.log")))
    assert r.returncode == 0, r.stderr
    text = words(r.stdout)
    assert "No out of memory in these logs." in text
    assert "Whole log:" in text and "admission(s) through a gap" in text
    j = json.loads(cli("replay", fleet_dir / "agent" / "pp0.log", "--format", "json").stdout)
    assert len(j["whole_log"]["gap_admissions"]) > 10
    assert j["whole_log"]["tightest_margin"]["margin"] > 0
