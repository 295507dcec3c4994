"""``--since`` / ``--until`` narrow every command that reads logs, the same way: a round
number or a time, rounds outside still rebuilt (later ones depend on them) but neither
checked nor replayed, and what lies past ``--until`` no part of the replay."""

import json
import shutil

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
