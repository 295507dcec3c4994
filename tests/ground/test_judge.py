"""How scripts/ground_truth.py counts a replay's answers against a world's truth."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "scripts" / "ground_truth.py"
_SPEC = importlib.util.spec_from_file_location("ground_truth", _PATH)
gt = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gt)

CRASH = {"round": 12, "rid": "as-v", "tokens": 2056, "available": 0}
TRUTH = {
    "crash": CRASH,
    "start_round": 9,
    "cause": "unreserved_tail",
    "forced_resume": True,
    "crash_piece_last": False,
    "transfer_base_s": 3.0,
    "round_seconds_mean": 0.4,
    "policies": {
        "prefix": {"oom": CRASH},
        "fixed": {"oom": None},
        "upstream": {"oom": None},
        "drain": {"oom": None},
        "park": {"oom": None},
    },
}
REPLAY = {
    "observed_oom": CRASH,
    "start_round": 9,
    "policies": {
        "prefix": {"oom": CRASH},
        "fixed": {"oom": None},
        "upstream": {"oom": None},
        "drain": {"oom": None},
        "park": {"oom": None},
    },
    "causes": [{"id": "unreserved_tail", "held": True}, {"id": "forced_resume", "held": True}],
    "unexplained_drops": [],
    "contradictions": [],
    "fidelity": {"mismatches": []},
    "assumptions": ["a round lasts 0.50 s (derived)", "KV transfers take 4.00 s (inferred)"],
}


def _judge(truth=TRUTH, rep=REPLAY) -> dict:
    return gt.judge(truth, 0, rep, "")


def test_agreement_is_right_on_every_row():
    j = _judge()
    assert set(j["rows"].values()) == {"right"}
    assert j["diffs"] == []


def test_a_fix_that_still_crashes_in_the_world_is_a_wrong_answer():
    truth = copy.deepcopy(TRUTH)
    truth["policies"]["fixed"]["oom"] = {**CRASH, "round": 14}
    j = _judge(truth)
    assert j["rows"]["fixed"] == "wrong"
    assert j["categories"] == ["fixed: answer differs"]


def test_prefix_forward_run_must_match_round_rid_tokens_and_available():
    rep = copy.deepcopy(REPLAY)
    rep["policies"]["prefix"]["oom"] = {**CRASH, "tokens": 2120}
    j = _judge(rep=rep)
    assert j["rows"]["prefix reproduces it"] == "wrong"
    assert "replay took transfers 4.0 s, world 3.0 s" in j["diffs"][0]


@pytest.mark.parametrize(("between", "cause_row"), [((3, 4), "right"), ((10, 11), "wrong")])
def test_an_outside_drop_counts_against_the_cause_only_in_the_victims_life(between, cause_row):
    rep = copy.deepcopy(REPLAY)
    rep["unexplained_drops"] = [{"after_round": between[0], "before_round": between[1]}]
    assert _judge(rep=rep)["rows"]["cause"] == cause_row


@pytest.mark.parametrize(("taken", "cause_row"), [([], "wrong"), ([[30.0, 640]], "right")])
def test_memory_taken_outside_is_claimed_only_where_the_world_took_some(taken, cause_row):
    """An external_allocation held beside the world's cause is a finding where the world
    took memory outside the adder in the victim's life, and a phantom where it took none."""
    rep = copy.deepcopy(REPLAY)
    rep["causes"].append({"id": "external_allocation", "held": True})
    truth = {**TRUTH, "outside_in_victim_life": taken}
    assert _judge(truth, rep)["rows"]["cause"] == cause_row


@pytest.mark.parametrize(("last", "claimed", "row"), [
    (True, False, "right"), (True, True, "wrong"), (False, True, "right"), (False, False, "wrong"),
])  # fmt: skip
def test_forced_resume_is_not_expected_on_a_last_piece(last, claimed, row):
    truth = {**TRUTH, "crash_piece_last": last}
    rep = copy.deepcopy(REPLAY)
    rep["causes"] = [c for c in rep["causes"] if claimed or c["id"] != "forced_resume"]
    assert _judge(truth, rep)["rows"]["forced_resume (not on a last piece)"] == row


def test_an_answer_marked_as_depending_on_the_unobserved_is_counted_apart():
    rep = copy.deepcopy(REPLAY)
    rep["policies"]["drain"] = {"oom": CRASH, "holds_for": {"transfer_s": [0.5, 2.0]}}
    rep["policies"]["park"] = {"oom": None, "holds_for": "all"}
    rows = _judge(rep=rep)["rows"]
    assert (rows["drain"], rows["park"]) == ("marked wrong", "right")


def test_contradictions_are_named_by_kind():
    rep = copy.deepcopy(REPLAY)
    rep["contradictions"] = [{"what": "baseline_end"}, {"what": "#new-token"}]
    j = _judge(rep=rep)
    assert j["rows"]["0 contradictions, 0 mismatches"] == "wrong"
    assert j["categories"] == [
        "PP1/PP3 lines and PP0's rebuilt rounds disagree; rebuilt baseline outside the pool"
    ]


def test_no_json_from_the_replay_is_its_own_outcome():
    j = gt.judge(TRUTH, 70, None, "Traceback")
    assert j == {"replay": "no JSON (exit 70): Traceback", "exit": 70}
