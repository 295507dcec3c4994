"""`kvforensics reproduce`'s emitted tests against SGLang 0.5.23's own wheel.

Each emitted test file runs in the reference venv twice: as released (the fork target
with the fork's alignment patched in by the test itself) it must fail, every test of it;
with the fix patched in (``adder_fix.py``, ``KVF_ADDER_FIX=tail``: the tail charged to
``rem_total_token_offset``) it must pass. For the shipped incident (both targets) and
synthesized causes; an outside allocation gets a scenario and no test.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from kvforensics.cli._inputs import LogOptions
from kvforensics.replay import ReplayOptions, replay_logs
from kvforensics.reproduce.make import case_from_replay, make, reproducer_for
from kvforensics.scenario import load_scenario
from kvforensics.synth.incidents import INCIDENTS

from .reference_client import reference_python
from .releases import ROOT

pytestmark = pytest.mark.conformance

HERE = Path(__file__).resolve().parent
INCIDENT = [ROOT / "fixtures/logs/incident" / n for n in ("pp0.log", "pp1.log.gz", "pp3.log")]


#: (label, logs' maker, target, tests at least): the incident on both targets and the
#: synthesized causes an adder change guards
CASES = [
    ("incident-fork", None, "fork", 2),
    ("incident-0.5.23", None, "sglang-0.5.23", 1),
    ("unreserved_tail-fork", "unreserved_tail", "fork", 2),
    ("unreserved_tail-0.5.23", "unreserved_tail", "sglang-0.5.23", 1),
    (
        "late_gap-fork",
        "late_gap",
        "fork",
        1,
    ),  # the gap is a resumed piece's: that round is the test
    ("page_granularity-fork", "page_granularity", "fork", 2),
]


def run_in_reference(tests: list[Path], fix: bool) -> dict[str, str]:
    """Every emitted file in one session of SGLang 0.5.23's venv (one import of SGLang):
    test id -> PASSED or FAILED."""
    py = reference_python()
    if not py.exists():
        pytest.fail(f"{py} not found: build it with `bash scripts/conformance_env.sh`")
    env = {**os.environ, "PYTHONPATH": str(HERE), "KVF_ADDER_FIX": "tail" if fix else ""}
    got = subprocess.run(
        [str(py), "-W", "ignore", "-m", "pytest", "-p", "adder_fix", "-p", "no:cacheprovider",
         "--import-mode=importlib", "-q", "-rA", *map(str, tests)],
        cwd=tests[0].parent.parent, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = got.stdout + got.stderr
    results = {test: word for word, test in re.findall(r"^(PASSED|FAILED) (\S+)", out, re.M)}
    assert results, out
    return results


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    """Every case's reproducer written out, and its tests' outcomes under SGLang 0.5.23 as
    released and with the fix: label -> (reproducer, test file, as released, with fix)."""
    root = tmp_path_factory.mktemp("reproduce")
    rr = replay_logs(INCIDENT, ReplayOptions(["fixed"], stream=True))
    incident = case_from_replay(rr, "repro-incident")
    reps = {}
    for label, synth, target, _ in CASES:
        if synth is None:
            rep = make(incident, source="the incident", target=target)
        else:
            inc = INCIDENTS[synth]()
            logs = inc.write(root / f"logs-{label}")
            rep = reproducer_for(logs, LogOptions(profile=inc.profile).replay_options(), target=target, fix="fixed")
        rep.write(root / label)
        reps[label] = rep
    files = [root / label / rep.test_name for label, rep in reps.items()]
    stock, fixed = run_in_reference(files, fix=False), run_in_reference(files, fix=True)
    return {label: (rep, root / label / rep.test_name, stock, fixed) for label, rep in reps.items()}


def _outcomes(results: dict[str, str], test: Path) -> list[str]:
    return [word for tid, word in sorted(results.items()) if tid.startswith(f"{test.parent.name}/")]


@pytest.mark.parametrize(("label", "synth", "target", "least"), CASES, ids=[c[0] for c in CASES])
def test_reproducer_fails_as_released_and_passes_with_the_fix(emitted, label, synth, target, least):
    rep, test, stock, fixed = emitted[label]
    # the scenario loads and crashes under prefix, not under the fix
    sc = load_scenario(test.parent / "reproducer.toml")
    assert sc.build_node("prefix").run(2000).oom is not None
    assert sc.build_node(rep.fix).run(2000).oom is None
    n = len(rep.tests)
    assert n >= least
    assert _outcomes(stock, test) == ["FAILED"] * n
    assert _outcomes(fixed, test) == ["PASSED"] * n
    if synth is None:  # the acceptance bounds on the shipped incident
        c = rep.shrunk.case
        assert len(c.requests()) <= 4 and c.pool_size * 8 <= rep.shrunk.original.pool_size


def test_outside_allocation_gets_a_scenario_and_no_test(tmp_path):
    inc = INCIDENTS["external_allocation"]()
    rep = reproducer_for(inc.write(tmp_path), LogOptions().replay_options(), target="fork", fix="fixed")
    assert rep.test_text is None and rep.tests == ()
    assert "no adder test can guard it" in rep.omitted[0]
    paths = rep.write(tmp_path / "out")
    assert [p.name for p in paths] == ["reproducer.toml"]
    sc = load_scenario(paths[0])
    assert sc.outside and sc.build_node("prefix").run(2000).oom is not None
