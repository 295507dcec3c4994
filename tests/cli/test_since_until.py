"""``--since`` / ``--until`` narrow every command that reads logs, the same way: a round
number or a time, rounds outside still rebuilt (later ones depend on them) but neither
checked nor replayed, and what lies past ``--until`` no part of the replay."""

import json
import shutil
from datetime import datetime

import polars as pl
import pytest

from tests.cli.test_options import INC, cli, flags

PP0 = INC / "pp0.log"
READERS = ["rounds", "replay", "diff", "explain", "report", "exec", "scan"]


@pytest.mark.parametrize("command", READERS)
def test_every_command_that_reads_logs_takes_since_and_until(command):
    assert {"--since", "--until"} <= flags(command)


@pytest.mark.parametrize("command", READERS)
def test_a_bad_bound_is_one_line_naming_the_flag(command, tmp_path):
    extra = {"report": ["-o", tmp_path / "r"], "explain": ["--rid", "x"]}.get(command, [])
    r = cli(command, PP0, *extra, "--until", "yesterday")
    assert r.returncode == 2, r.stderr
    assert "--until 'yesterday'" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def _replay(*args) -> dict:
    r = cli("replay", PP0, "--format", "json", *args)
    assert r.returncode in (0, 4), r.stderr
    return json.loads(r.stdout)


def _logged_rounds(*args) -> int:
    r = cli("rounds", PP0, "--format", "json", *args)
    return sum(1 for x in json.loads(r.stdout)["rounds"] if x["observed"])


def test_replay_since_checks_only_the_rounds_from_there_and_still_reproduces():
    d = _replay("--since", "7700")
    assert d["fidelity"]["rounds_checked"] == _logged_rounds("--since", "7700")
    assert 0 < d["fidelity"]["rounds_checked"] < 5162
    assert d["start_round"] == 7747 and d["reproduced"] is True
    assert d["whole_log"]["rounds_rerun"] == 7751 - 7700


@pytest.mark.slow  # three replays of the incident bundle
def test_replay_until_ends_the_log_there():
    d = _replay("--until", "7749")
    assert d["observed_oom"] is None and d["reproduced"] is None
    assert d["fidelity"]["rounds_checked"] == _logged_rounds("--until", "7749")
    by_time = _replay("--until", "2026-11-02 15:16:28")  # round 7748's second
    assert by_time["observed_oom"] is None and by_time["whole_log"]["rounds_rerun"] == 7749


def test_diff_and_explain_narrowed_to_the_crash_tell_the_same_divergence():
    whole = json.loads(cli("diff", PP0, "--format", "json").stdout)
    part = cli("diff", PP0, "--format", "json", "--since", "7740")
    assert part.returncode == 0, part.stderr
    assert json.loads(part.stdout)["first_divergence"] == whole["first_divergence"]
    r = cli("explain", PP0, "--rid", "as-xpkq7d03n5", "--since", "7740")
    assert r.returncode == 0, r.stderr and "as-xpkq7d03n5" in r.stdout


def test_report_says_how_many_rounds_it_checked(tmp_path):
    r = cli("report", PP0, "-o", tmp_path / "r", "--since", "7700")
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "r" / "report.md").read_text()
    assert f"{_logged_rounds('--since', '7700')} logged rounds agree" in text


def test_scan_narrows_each_node(tmp_path):
    shutil.copy(PP0, tmp_path / "pp0.log")
    r = cli("scan", tmp_path, "--format", "json", "--jobs", "1", "--since", "7700")
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)["totals"]
    assert t["fidelity_rounds"] == _logged_rounds("--since", "7700") and t["ooms"] == 1


def _events(path) -> pl.DataFrame:
    return pl.read_parquet(path)


def test_parse_narrows_events_by_their_times(tmp_path):
    whole, part = tmp_path / "all.parquet", tmp_path / "part.parquet"
    assert cli("parse", PP0, "-o", whole).returncode == 0
    lo, hi = "2026-11-02 15:16:26", "2026-11-02 15:16:28"
    r = cli("parse", PP0, "-o", part, "--since", lo, "--until", hi)
    assert r.returncode == 0, r.stderr
    everything, got = _events(whole), _events(part)
    t = pl.col("time")
    inside = everything.filter(
        (t >= datetime.fromisoformat(lo)) & (t <= datetime.fromisoformat(hi))
    )
    assert 0 < got.height == inside.height < everything.height
    assert got["line"].to_list() == inside["line"].to_list()
    assert f"-> {got.height} events" in r.stdout
    assert f"{everything.height - got.height} event(s) outside those times" in r.stdout


def test_parse_keeps_events_without_a_time_as_rounds_do(tmp_path):
    """A line whose prefix has no date cannot be placed outside the times: kept, and said."""
    lines = PP0.read_text().splitlines()[:60]
    undated = [ln.replace("[2026-11-02 09:05:03 PP0]", "[09:05:03 PP0]") for ln in lines]
    log = tmp_path / "undated.log"
    log.write_text("\n".join(undated) + "\n")
    r = cli("parse", log, "-o", tmp_path / "e.parquet", "--since", "2026-11-02 10:00:00")
    assert r.returncode == 0, r.stderr
    got = _events(tmp_path / "e.parquet")
    moved = sum("[09:05:03 PP0]" in ln for ln in undated)
    assert moved and got.height == got["time"].null_count() >= 1
    assert "without a time kept" in r.stdout


@pytest.mark.parametrize("flag", ["--since", "--until"])
def test_parse_refuses_a_round_number_in_one_line_saying_why(flag, tmp_path):
    r = cli("parse", PP0, "-o", tmp_path / "e.parquet", flag, "7700")
    assert r.returncode == 2 and r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    assert f"{flag} 7700" in line and "not rounds" in line and "kvforensics rounds" in line
    assert list(tmp_path.iterdir()) == []


def test_parse_says_a_bad_time_as_the_other_commands_do(tmp_path):
    r = cli("parse", PP0, "-o", tmp_path / "e.parquet", "--until", "yesterday")
    other = cli("rounds", PP0, "--until", "yesterday")
    assert r.returncode == other.returncode == 2
    assert r.stderr == other.stderr
    assert list(tmp_path.iterdir()) == []
