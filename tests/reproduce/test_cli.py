"""`kvforensics reproduce` as a user runs it: on the shipped incident, on scenarios, and
on input it cannot reduce."""

from __future__ import annotations

import json
import tomllib

import pytest

from kvforensics.cli._inputs import LogOptions
from kvforensics.reproduce.make import reproducer_for
from tests.conftest import FIXTURES
from tests.incli import run

LOGS = [FIXTURES / "logs/incident" / n for n in ("pp0.log", "pp1.log.gz", "pp3.log")]
SCENARIOS = FIXTURES / "scenarios"


def cli(*args):
    return run(*args)


@pytest.fixture(scope="module")
def incident(tmp_path_factory):
    out = tmp_path_factory.mktemp("incident") / "repro"
    got = cli("reproduce", *LOGS, "-o", out, "--format", "json")
    assert got.returncode == 0, got.stderr
    return out, json.loads(got.stdout)


def test_incident_reproducer_is_small_and_crashes_only_under_prefix(incident):
    out, rep = incident
    r = rep["reduction"]
    assert r["requests_before"] == 3 and r["requests"] <= 4
    assert r["pool_size_before"] == 262144 and r["pool_size"] * 8 <= 262144
    assert r["seconds"] < 60
    assert rep["cause"] == "unreserved_tail" and rep["target"] == "fork"
    assert rep["tests"] == ["test_truncated_req_tail_blocks_host_load_back_admission",
                            "test_resumed_chunk_tail_blocks_waiting_admission"]  # fmt: skip
    sim = cli("simulate", out / "reproducer.toml", "--policy", "prefix,fixed", "--format", "json")
    assert sim.returncode == 0, sim.stderr
    pre, fix = json.loads(sim.stdout)
    assert pre["oom"]["rid"] == "as-1keim4u1e8" and fix["oom"] is None and not fix["unfinished"]
    ex = cli("exec", out / "reproducer.toml", "--policy", "prefix", "--format", "json")
    assert ex.returncode == 0, ex.stderr
    assert "Prefill out of memory" in ex.stdout


def test_incident_reproducer_says_what_it_keeps_and_drops(incident):
    _, rep = incident
    text = " ".join(rep["keeps"] + rep["drops"])
    assert "Keeps the cause's chain" in text
    for dropped in ("Drops the traffic", "Drops the KV transfers", "Drops the timing",
                    "Drops what only the logs hold"):  # fmt: skip
        assert dropped in text
    assert "pool 262144 -> " in text


def test_shrinking_is_deterministic(incident):
    out, _ = incident
    again = reproducer_for(LOGS, LogOptions().replay_options(), target="fork", fix="fixed")
    assert again.toml == (out / "reproducer.toml").read_text()
    assert again.test_text == (out / again.test_name).read_text()


def test_emitted_test_is_python_with_one_test_per_link(incident):
    out, rep = incident
    [test] = out.glob("test_*.py")
    text = test.read_text()
    compile(text, str(test), "exec")
    for name in rep["tests"]:
        assert f"def {name}(self):" in text
    assert "_fork_rules(self)" in text and "CHECKPOINT_ALIGN = 4" in text
    assert not [x for x in text.splitlines() if x.startswith(("from kvforensics", "import kvf"))]
    assert "init_load_back not called" in text


def test_release_target_goes_through_truncation_align_size(tmp_path):
    out = tmp_path / "r"
    got = cli("reproduce", SCENARIOS / "postmortem-abc.toml", "--target", "sglang-0.5.23",
              "-o", out, "--format", "json")  # fmt: skip
    assert got.returncode == 0, got.stderr
    rep = json.loads(got.stdout)
    assert rep["tests"] == ["test_truncated_req_tail_blocks_host_load_back_admission"]
    assert "does not align a resumed piece" in rep["omitted"][0]
    toml = tomllib.loads((out / "reproducer.toml").read_text())
    assert toml["profile"] == "sglang-0.5.23" and "align_size" not in toml["config"]
    assert toml["config"]["truncation_align_size"] > 0
    text = next(out.glob("test_*.py")).read_text()
    assert "_fork_rules" not in text and "TRUNCATION_ALIGN_SIZE = " in text


def test_outside_allocation_scenario_gets_no_test(tmp_path):
    sc = tmp_path / "outside.toml"
    sc.write_text(
        "[config]\npage_size = 16\nalign_size = 64\nchunked_prefill_size = 256\n"
        "max_prefill_tokens = 256\npool_size = 4096\n[pool]\nfree = 2048\n"
        '[[waiting]]\nrid = "v"\nseq_len = 1800\n[[outside]]\nbefore_round = 2\ntokens = 1024\n'
    )
    got = cli("reproduce", sc, "-o", tmp_path / "r")
    assert got.returncode == 0, got.stderr
    assert "no adder test can guard it" in " ".join(got.stdout.split())
    assert [p.name for p in (tmp_path / "r").iterdir()] == ["reproducer.toml"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--target", "nope"], "unknown --target 'nope'"),
        (["--policy", "prefix"], "unknown --policy 'prefix'"),
    ],
)
def test_bad_options_are_one_line(tmp_path, args, words):
    got = cli("reproduce", SCENARIOS / "postmortem-abc.toml", "-o", tmp_path / "r", *args)
    assert got.returncode == 2 and words in got.stderr
    assert len(got.stderr.strip().splitlines()) == 1 and not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("inputs", "words"),
    [
        ([SCENARIOS / "mooncake-conversation.toml"], "a trace-driven scenario cannot be reduced"),
        ([FIXTURES / "logs/clean/pp0.log"], "no out-of-memory to reproduce"),
        ([FIXTURES / "logs/stock/2024-2102-traceback.log"], "no PrefillAdder lines"),
        ([SCENARIOS / "prefix-counterexample.toml", LOGS[0]], "one scenario TOML, or log files"),
    ],
)
def test_what_cannot_be_reduced_is_one_line(tmp_path, inputs, words):
    got = cli("reproduce", *inputs, "-o", tmp_path / "r")
    assert got.returncode == 2, got.stdout
    assert words in got.stderr and len(got.stderr.strip().splitlines()) == 1


def test_scenario_without_the_chain(tmp_path):
    sc = tmp_path / "calm.toml"
    sc.write_text((SCENARIOS / "postmortem-abc.toml").read_text().replace("free = 12000", "free = 11000")
                  .replace("pool_size = 12000", "pool_size = 60000").replace("seq_len = 8000", "seq_len = 800"))  # fmt: skip
    got = cli("reproduce", sc, "-o", tmp_path / "r")
    assert got.returncode == 2 and "no out-of-memory under prefix" in got.stderr


def test_a_non_empty_output_directory_is_refused(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    got = cli("reproduce", SCENARIOS / "postmortem-abc.toml", "-o", tmp_path)
    assert got.returncode == 2 and "is not empty" in got.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]
