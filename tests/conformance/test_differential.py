"""Differential test: random prefill rounds through each release's own ``PrefillAdder``
(0.5.23 and the releases of ``sglang-releases.txt``) and through the model with that
release's profile (``profile_for_release``) and policy ``upstream``, compared record by
record: every ``add_chunked_req`` / ``add_one_req`` result, decision, piece, the three
remaining budgets and both offsets, and the load-back.

Any difference fails; hypothesis shrinks the round to the smallest one that still
differs and the failure prints it as JSON, with the differing fields. Examples per run:
``KVF_DIFF_EXAMPLES`` (default 300, for 0.5.23), ``KVF_DIFF_EXAMPLES_OTHER`` (default 100 per
earlier release); ``KVF_RELEASES`` narrows the releases;
``scripts/conformance.py`` runs the same comparison for many more rounds.
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, assume, given, settings

from .model_round import run_model_round
from .releases import profile_name
from .rounds import compare_round, round_specs

pytestmark = pytest.mark.conformance

EXAMPLES = int(os.environ.get("KVF_DIFF_EXAMPLES", "300"))
#: per release before 0.5.23 (eight of them): CI time
EXAMPLES_OTHER = int(os.environ.get("KVF_DIFF_EXAMPLES_OTHER", "100"))


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    print_blob=True,
)
@given(spec=round_specs())
def test_model_matches_sglang_adder(sglang_ref, spec):
    _check(sglang_ref, spec)


@settings(
    max_examples=EXAMPLES_OTHER,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    print_blob=True,
)
@given(spec=round_specs())
def test_model_matches_each_releases_adder(other_release_ref, spec):
    _check(other_release_ref, spec)


def _check(release_ref, spec):
    out = compare_round(release_ref, spec)
    assume(not out.out_of_domain)
    assert not out.diffs, (
        f"model ({profile_name(release_ref.release)}) differs from SGLang "
        f"{release_ref.release}'s PrefillAdder\nround_spec = "
        + json.dumps(spec)
        + "\n"
        + "\n".join(out.diffs)
    )


def test_hand_checked_rounds_match(release_ref):
    # The rounds of test_sglang_ref.py, through the model too, for every release.
    from .test_sglang_ref import ABC, spec

    for s in (
        ABC,
        spec(truncation_align_size=1024),
        spec(free=0, chunked={"rid": "B", "seq_len": 8000, "start": 3008}),
        spec(free=1000, chunked={"rid": "B", "seq_len": 8000, "start": 3008}),
        spec(
            free=100000,
            truncation_align_size=100,
            queue=[
                {"rid": r, "seq_len": 9000, "device_prefix": 0, "host_hit": 0} for r in ("X", "Y")
            ],
        ),
    ):
        got = run_model_round(s, profile_name(release_ref.release))
        assert got == release_ref.run(s), json.dumps(s)
