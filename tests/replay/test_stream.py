"""``rounds -o`` streams what ``rounds --format json`` prints; ``--since``/``--until``
narrow the rounds."""

import json

from tests.conftest import FIXTURES
from tests.replay.test_replay_cli import cli

INC = FIXTURES / "logs" / "incident"


def test_rounds_output_streams_what_json_prints(tmp_path):
    out = tmp_path / "r.ndjson"
    r = cli("rounds", INC / "pp0.log", "-o", out)
    assert r.returncode == 0, r.stderr
    printed = json.loads(cli("rounds", INC / "pp0.log", "--format", "json").stdout)
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert written == printed["rounds"]
    assert "7751 rounds written" in r.stdout


def test_since_until_narrow_rounds_and_parquet(tmp_path):
    import polars as pl

    out = tmp_path / "r.parquet"
    r = cli("rounds", INC / "pp0.log", "-o", out, "--since", "7747", "--until", "7749")
    assert r.returncode == 0, r.stderr
    assert pl.read_parquet(out)["round"].unique().sort().to_list() == [7747, 7748, 7749]
    by_time = cli("rounds", INC / "pp0.log", "--since", "2026-11-02 15:16:28", "--format", "json")
    assert [x["round"] for x in json.loads(by_time.stdout)["rounds"]] == [7748, 7749, 7750]


def test_bad_since_is_a_one_line_error(tmp_path):
    r = cli("rounds", INC / "pp0.log", "--since", "yesterday")
    assert r.returncode == 2
    assert "--since 'yesterday'" in r.stderr and "Traceback" not in r.stderr
