"""Every command under hostile inputs: never exit 70, a traceback, a changed input, a
stray or half-written file, or a run over 30 s. Bounded and derandomized for CI; the
long run is scripts/fuzz.py."""

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz._cases import COMMANDS, make_case, make_ledgers
from tests.fuzz._runner import run_case

#: examples per command (about 2 minutes for all of them on a shared 2-core machine)
EXAMPLES = {"report": 6, "exec": 4, "scan": 6}
DEFAULT_EXAMPLES = 14


@pytest.fixture(scope="module")
def ledgers(tmp_path_factory):
    return make_ledgers(tmp_path_factory.mktemp("seed"))


@pytest.mark.parametrize("command", COMMANDS)
def test_command_survives_hostile_inputs(command, ledgers):
    @settings(
        max_examples=EXAMPLES.get(command, DEFAULT_EXAMPLES),
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(rng=st.randoms(use_true_random=False))
    def check(rng):
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            case = make_case(rng, tmp, ledgers, cmd=command)
            result = run_case(case, tmp)
            assert not result.problems, (case.describe(), result.code, result.problems)

    check()
