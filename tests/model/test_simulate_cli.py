"""`kvforensics simulate` as a user runs it."""

import json

import polars as pl

from tests.conftest import FIXTURES
from tests.incli import run

INCIDENT = FIXTURES / "scenarios" / "incident-2026-11-02.toml"


def cli(*args):
    return run(*args)


def test_json_per_policy():
    out = cli("simulate", INCIDENT, "--policy", "prefix,fixed", "--format", "json")
    assert out.returncode == 0, out.stderr
    pre, fix = json.loads(out.stdout)
    assert pre["policy"] == "prefix"
    assert pre["oom"] == {"round": 3, "rid": "as-1keim4u1e8", "tokens": 2056, "available": 0}
    assert fix["oom"] is None
    r0 = pre["rounds"][0]
    assert [(p["rid"], p["start"], p["end"]) for p in r0["pieces"]] == [
        ("as-v9ujq2m0c1", 0, 13888),
        ("as-1keim4u1e8", 86784, 89088),
        ("as-xpkq7d03n5", 15360, 15545),
    ]
    assert [d["decision"] for d in r0["decisions"]] == ["full", "truncated", "full"]


def test_ledger_export_round_trips(tmp_path):
    for ext in ("parquet", "csv", "ndjson"):
        path = tmp_path / f"ledger.{ext}"
        out = cli("simulate", INCIDENT, "--ledger", path)
        assert out.returncode == 0, out.stderr
        df = {"parquet": pl.read_parquet, "csv": pl.read_csv, "ndjson": pl.read_ndjson}[ext](path)
        assert set(df["policy"].unique()) == {"prefix", "fixed"}
        c = df.filter(
            (pl.col("policy") == "fixed")
            & (pl.col("rid") == "as-xpkq7d03n5")
            & (pl.col("round") == 0)
        )
        assert c["rem_total_tokens"].to_list() == [13310]


def test_bad_input_one_line(tmp_path):
    for args, says in [
        (("simulate", tmp_path / "none.toml"), "no such scenario file"),
        (("simulate", INCIDENT, "--policy", "bogus"), "unknown policy bogus"),
        (("simulate", INCIDENT, "--ledger", INCIDENT), "refusing to write"),
        (("simulate", INCIDENT, "--ledger", tmp_path / "x.xlsx"), "unknown output format"),
    ]:
        out = cli(*args)
        assert out.returncode == 2, args
        assert says in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert INCIDENT.read_text().startswith("name = ")  # the input was not written
    bad = tmp_path / "bad.toml"
    bad.write_text(INCIDENT.read_text().replace("page_size = 64", "page_size = 0"))
    out = cli("simulate", bad)
    assert out.returncode == 2 and "config.page_size: 0 must be positive" in out.stderr


def test_long_runs_show_the_last_rounds():
    out = cli(
        "simulate",
        FIXTURES / "scenarios" / "mooncake-conversation.toml",
        "--policy",
        "fixed",
        "--show",
        "5",
    )
    assert out.returncode == 0, out.stderr
    assert "last 5 of" in out.stdout and "no out of memory under fixed" in out.stdout
