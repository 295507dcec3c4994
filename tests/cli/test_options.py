"""One set of options across commands; exit codes and small cases, as a user meets them."""

import json
import subprocess
import sys

import pytest
import typer

from kvforensics.cli import app
from tests.conftest import FIXTURES, ROOT
from tests.incli import run

INC = FIXTURES / "logs" / "incident"
SCENARIO = FIXTURES / "scenarios" / "incident-2026-11-02.toml"
INPUT_FLAGS = {
    "--transfer-seconds",
    "--formats",
    "--page-size",
    "--align",
    "--chunk-size",
    "--pool-size",
    "--rank",
}


def cli(*args, columns=None):
    return run(*args, columns=columns, cwd=ROOT)


def flags(command: str) -> set[str]:
    group = typer.main.get_command(app)
    return {o for p in group.commands[command].params for o in p.opts}


@pytest.mark.parametrize("command", ["replay", "diff", "explain", "report", "exec"])
def test_commands_that_replay_logs_take_replays_input_flags(command):
    have = flags(command)
    assert have >= INPUT_FLAGS, INPUT_FLAGS - have
    assert "--policy" in have and "--policies" not in have


def test_rounds_takes_the_same_log_flags_except_the_transfer_time():
    assert INPUT_FLAGS - {"--transfer-seconds"} <= flags("rounds")


def test_simulate_takes_policy():
    assert "--policy" in flags("simulate")


@pytest.mark.parametrize(
    "args",
    [
        ("replay", INC / "pp0.log", "--format", "yaml"),
        ("rounds", INC / "pp0.log", "--format", "jsn"),
        ("simulate", SCENARIO, "--format", "csv"),
        ("diff", SCENARIO, "--format", "html"),
        ("explain", SCENARIO, "--round", "0", "--format", "yaml"),
    ],
)
def test_unknown_format_is_exit_2_with_the_choices(args):
    r = cli(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    assert repr(args[-1]) in line and "table" in line and "json" in line


@pytest.mark.parametrize(
    "args",
    [
        ("replay", INC / "pp0.log", "--policy", "fixd"),
        ("simulate", SCENARIO, "--policy", "prefix,nope"),
        ("diff", SCENARIO, "--policy", "prefix,nope"),
        ("explain", SCENARIO, "--round", "0", "--policy", "nope"),
        ("report", SCENARIO, "-o", "unused-dir", "--policy", "nope"),
    ],
)
def test_unknown_policy_is_exit_2_with_the_choices(args, tmp_path):
    r = cli(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert "fixed" in line and "upstream" in line and "drain" in line
    assert not (ROOT / "unused-dir").exists()


def test_version():
    from importlib.metadata import version

    r = cli("--version")
    assert r.returncode == 0
    assert r.stdout.strip() in {
        f"kvforensics {version('kvforensics')} (pure Python)",
        f"kvforensics {version('kvforensics')} (compiled: model, rounds, replay)",
    }


def test_explain_of_logs_takes_the_transfer_time():
    """--transfer-seconds reaches commands other than replay: C's first token moves."""

    def delay(seconds):
        r = cli("replay", INC / "pp0.log", "--transfer-seconds", seconds, "--format", "json")
        d = json.loads(r.stdout)
        return {x["rid"]: x["delay_s"] for x in d["policies"]["fixed"]["delays"]}

    c = "as-xpkq7d03n5"
    assert delay(9)[c] > delay(5)[c] > 0

    def admitted(seconds):  # the baseline C's admission under fixed reads, as explain tells it
        r = cli(
            "explain", INC / "pp0.log", "--rid", c, "--policy", "fixed",
            "--transfer-seconds", seconds, "--format", "json",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        steps = json.loads(r.stdout)[-1]["policies"]["fixed"]["steps"]
        return next(s["baseline"] for s in steps if s["call"] == "add_one_req" and s["rid"] == c)

    # the sooner transfers end after the logs stop showing the node, the more memory C finds
    assert admitted(2) > admitted(9)
    r = cli("explain", INC / "pp0.log", "--round", 7747, "--rank", "PP9", "--format", "json")
    assert r.returncode == 2 and "PP9" in r.stderr and "PP0" in r.stderr


@pytest.mark.parametrize("extra", [(), ("--format", "json"), ("-o", "rounds.ndjson")])
def test_rounds_of_a_pp1_log_alone_is_exit_2_naming_the_file_and_asking_for_pp0(extra, tmp_path):
    extra = tuple(str(tmp_path / x) if x.endswith(".ndjson") else x for x in extra)
    r = cli("rounds", INC / "pp1.log.gz", *extra, columns=200)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    assert "PP1 (" in line and "pp1.log.gz" in line and "PP0" in line
    assert "no PrefillAdder lines" in line and "None" not in line
    assert list(tmp_path.iterdir()) == []


def test_rounds_with_rank_naming_a_rank_without_adder_lines_says_whose_they_are(tmp_path):
    for extra in ((), ("-o", str(tmp_path / "r.parquet"))):
        r = cli("rounds", INC / "pp0.log", INC / "pp1.log.gz", "--rank", "PP1", *extra)
        assert r.returncode == 2, (r.stdout, r.stderr)
        (line,) = r.stderr.strip().splitlines()
        assert "PP1 (" in line and "another rank's" in line and "--rank" in line
    assert list(tmp_path.iterdir()) == []
    narrowed = cli("rounds", INC / "pp0.log", "--since", "99999")  # rounds, none shown
    assert narrowed.returncode == 0, narrowed.stderr


def test_rounds_exits_3_on_contradictions_like_replay():
    log = FIXTURES / "logs" / "contradiction" / "pp0.log"
    rep = cli("replay", log, "--format", "json")
    d = json.loads(rep.stdout)
    assert d["contradictions"] or d["fidelity"]["mismatches"]
    rounds = cli("rounds", log, "--format", "json")
    expected = 3 if json.loads(rounds.stdout)["contradictions"] else 0
    assert rounds.returncode == expected
    clean = cli("rounds", FIXTURES / "logs" / "clean" / "pp0.log")
    assert clean.returncode == 0


def test_logs_from_different_times_are_one_line_not_a_flood():
    """A deciding log and another rank's log of another run: said once, nothing paired."""
    r = cli("replay", FIXTURES / "logs" / "clean" / "pp0.log", INC / "pp3.log", "--format", "json")
    d = json.loads(r.stdout)
    kinds = [c["what"] for c in d["contradictions"]]
    assert kinds == ["different times"], kinds
    assert "PP3" in d["contradictions"][0]["detail"]
    assert "pp3.log" in d["contradictions"][0]["detail"]
    assert r.returncode == 3


def test_rounds_of_a_release_log_with_a_rank_it_lacks_names_the_ranks_there():
    r = cli("rounds", INC / "pp3.log", "--rank", "PP0")
    assert r.returncode == 2 and r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    assert "--rank PP0" in line and "PP3 in" in line and "pp3.log" in line
    assert cli("rounds", INC / "pp3.log", "--rank", "PP3", "--last", "1").returncode == 0


def test_a_reader_that_closes_the_pipe_stops_the_command_quietly_with_exit_1():
    """``replay ... | head -1``: a real process whose stdout's reader has gone."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvforensics", "replay", INC / "pp0.log", INC / "pp3.log",
         "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader goes away after one line
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 1
    assert first.startswith(b"Read 2 file(s)")
    assert err == b"", err
