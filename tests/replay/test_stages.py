"""The replay's stages as values: the options given once, the result frozen, the node
builder it keeps, the cost re-runs only when asked for, and a log without adder lines
refused with what a release's log still tells."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvforensics.errors import InputError
from kvforensics.replay import ReplayOptions, replay_logs
from kvforensics.replay.replay import MAX_ROUNDS
from kvforensics.replay.stock import NoAdderLines

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "logs"
CLEAN = LOGS / "clean" / "pp0.log"
STOCK = LOGS / "stock" / "2025-5081-flattened-oom.log"


@pytest.fixture(scope="module")
def clean():
    return replay_logs([CLEAN], ReplayOptions(["fixed"], costs=True))


def test_options_keep_the_sequences_given_as_tuples():
    opts = ReplayOptions(["fixed", "park"], formats=[Path("fork.toml")])
    assert opts.policies == ("fixed", "park") and opts.formats == (Path("fork.toml"),)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.stream = True


def test_a_replay_is_frozen(clean):
    with pytest.raises(dataclasses.FrozenInstanceError):
        clean.causes = ()
    assert isinstance(clean.assumptions, tuple) and isinstance(clean.causes, tuple)


def test_the_builder_gives_the_runs_the_replay_made(clean):
    assert clean.builder is not None
    for policy, res in clean.results.items():
        again = clean.builder.build(policy).run(MAX_ROUNDS)
        assert (again.oom, len(again.rounds)) == (res.oom, len(res.rounds)), policy


def test_the_cost_re_runs_come_with_the_replay_when_asked(clean):
    used = [r for r in clean.costs if r.used]
    assert len(used) == 1 and set(used[0].ooms) == {"prefix", "fixed"}
    assert replay_logs([CLEAN], ReplayOptions(["fixed"])).costs == ()


def test_a_release_log_is_refused_with_what_it_tells():
    with pytest.raises(NoAdderLines) as got:
        replay_logs([STOCK], ReplayOptions(["fixed"]))
    assert isinstance(got.value, InputError) and got.value.release
    assert "no PrefillAdder lines" in str(got.value)
    assert got.value.stock().as_dict()["mode"] == "stock"
