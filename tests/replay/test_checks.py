"""The per-round re-runs in a second process (``replay --jobs 2``) give what they give in
this one; a second process that stops or fails is a one-line error."""

import json

import pytest

from kvforensics.errors import KvfError
from kvforensics.model.profiles import FORK
from kvforensics.replay import checks
from kvforensics.replay.checks import Remote, default_jobs, pack_round, unpack_round
from kvforensics.replay.whole_log import is_replayable, rerun
from kvforensics.rounds import from_logs
from tests.replay.test_replay_cli import cli
from tests.replay.test_stream import INC, INPUTS, _json


@pytest.fixture(scope="module")
def incident():
    return from_logs([INC / "pp0.log"]).rebuild


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_a_second_process_says_what_one_says(name, monkeypatch):
    # small batches, few in flight: a round leaves the 50-round window while the rounds
    # after it are still being checked, so a refusal in it must be waited for
    monkeypatch.setattr(checks, "BATCH", 7)
    monkeypatch.setattr(checks, "AHEAD", 2)
    one = _json(INPUTS[name], stream=True, window=50, jobs=1)
    assert _json(INPUTS[name], stream=True, window=50, jobs=2) == one


def test_the_incident_has_refusals_to_carry_back():
    rr_json = json.loads(_json(INPUTS["incident"], stream=True, jobs=2))
    refused = rr_json["whole_log"]["refused"]
    assert sum(len(v) for v in refused.values()) > 0


def test_a_packed_round_re_runs_as_the_round(incident):
    rounds = [r for r in incident.rounds if is_replayable(r)][:400]
    lens = dict(incident.seq_lens)
    for rnd in rounds:
        back, got_lens, late = unpack_round(pack_round(rnd, lens, False))
        assert (back.index, back.time, got_lens, late) == (rnd.index, rnd.time, lens, False)
        for policy in ("prefix", "fixed"):
            a, b = rerun(incident, rnd, policy), rerun(incident, back, policy)
            assert a.steps == b.steps and a.oom == b.oom


def _remote(rb) -> Remote:
    return Remote(checks.Pipes(), rb.cfg, FORK, True)


def _fed(remote: Remote, rb) -> tuple:
    for rnd in rb.rounds:
        remote.add(rnd, {p.rid: rb.seq_lens[p.rid] for p in rnd.pieces if p.rid in rb.seq_lens})
    return remote.result(), sorted((r.index, rid) for v in remote.refused.values() for r, rid in v)


def test_a_second_process_that_stops_before_it_is_ready_leaves_the_work_here(incident):
    here = _fed(_remote(incident), incident)
    remote = _remote(incident)
    remote._link.proc.kill()
    remote._link.proc.wait()
    assert _fed(remote, incident) == here and type(remote._link) is checks.Here
    assert here[0].rounds_checked == 5162 and here[1]


def test_a_second_process_that_stops_later_is_a_one_line_error(incident):
    remote = _remote(incident)
    for rnd in incident.rounds[:3000]:
        remote.add(rnd)
    remote.settle()  # it answered: it was ready
    remote._link.proc.kill()
    remote._link.proc.wait()
    with pytest.raises(KvfError, match=r"stopped \(exit code -9\); run again with --jobs 1"):
        for rnd in incident.rounds[3000:]:
            remote.add(rnd)
        remote.result()


def test_a_failure_in_the_second_process_is_raised_here(incident):
    remote = _remote(incident)
    remote._put([("not", "a", "packed", "round")])
    with pytest.raises(ValueError, match="unpack"):
        remote._get()
    remote.close()


def test_where_no_second_process_starts_the_rounds_are_checked_here(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("Resource temporarily unavailable")

    monkeypatch.setattr(checks.subprocess, "Popen", refuse)
    assert checks.start(2) is None and checks.start(1) is None
    one = _json(INPUTS["clean"], stream=True, jobs=1)
    assert _json(INPUTS["clean"], stream=True, jobs=2) == one


def test_large_logs_get_a_second_process_where_there_are_two_cpus(tmp_path, monkeypatch):
    small, big = tmp_path / "small.log", tmp_path / "big.log"
    small.write_bytes(b"x" * 1000)
    with big.open("wb") as f:
        f.truncate(checks.REMOTE_BYTES)
    monkeypatch.setattr(checks.os, "cpu_count", lambda: 2)
    assert default_jobs([small]) == 1 and default_jobs([big]) == 2
    assert default_jobs([small, tmp_path / "missing.log"]) == 1
    monkeypatch.setattr(checks.os, "cpu_count", lambda: 1)
    assert default_jobs([big]) == 1


def test_replay_jobs_2_prints_what_jobs_1_prints():
    one = cli("replay", INC / "pp0.log", "--format", "json", "--jobs", "1")
    two = cli("replay", INC / "pp0.log", "--format", "json", "--jobs", "2")
    assert one.returncode == two.returncode == 0, two.stderr
    assert two.stdout == one.stdout
    assert json.loads(two.stdout)["fidelity"]["rounds_checked"] == 5162

