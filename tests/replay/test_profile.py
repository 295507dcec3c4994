"""The profile a replay runs the model under, and its reason in the output: detected from
the fork's adder lines, given with --profile (which changes what the fidelity check finds),
or the default."""

from __future__ import annotations

from pathlib import Path

from kvforensics.replay import ReplayOptions, replay_logs

CLEAN = Path(__file__).resolve().parents[2] / "fixtures" / "logs" / "clean" / "pp0.log"


def test_the_forks_log_runs_the_fork_profile_and_says_why():
    rr = replay_logs([CLEAN], ReplayOptions(["fixed"]))
    d = rr.as_dict()["profile"]
    assert (d["name"], d["how"], d["release"]) == ("fork", "detected", None)
    assert d["where"].startswith(str(CLEAN) + ":") and "PrefillAdder.add_one_req" in d["line"]
    assert rr.fidelity.mismatches == ()


def test_a_given_profile_is_the_one_every_policy_runs():
    rr = replay_logs([CLEAN], ReplayOptions(["fixed"], profile="sglang-0.5.9"))
    assert rr.as_dict()["profile"]["how"] == "given"
    node = rr.builder.build("prefix")
    assert node.profile.name == "sglang-0.5.9"
    # 0.5.9's adder charges no page per piece: the fork's rounds are not its rounds
    assert rr.fidelity.mismatches
