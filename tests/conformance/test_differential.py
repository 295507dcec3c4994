"""Differential test: random prefill rounds through SGLang 0.5.23's own ``PrefillAdder``
and through the model (profile ``sglang-0.5.23``, policy ``upstream``), compared record
by record: every ``add_chunked_req`` / ``add_one_req`` result, decision, piece, the three
remaining budgets and both offsets, and the load-back.

Any difference fails; hypothesis shrinks the round to the smallest one that still
differs and the failure prints it as JSON, with the differing fields. Examples per run:
``KVF_DIFF_EXAMPLES`` (default 300); ``scripts/conformance.py`` runs the same comparison
for many more rounds.
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, assume, given, settings

from .model_round import run_model_round
from .rounds import compare_round, round_specs

pytestmark = pytest.mark.conformance

EXAMPLES = int(os.environ.get("KVF_DIFF_EXAMPLES", "300"))


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    print_blob=True,
)
@given(spec=round_specs())
def test_model_matches_sglang_adder(sglang_ref, spec):
    out = compare_round(sglang_ref, spec)
    assume(not out.out_of_domain)
    assert not out.diffs, (
        "model differs from SGLang 0.5.23's PrefillAdder\nround_spec = "
        + json.dumps(spec)
        + "\n"
        + "\n".join(out.diffs)
    )


def test_hand_checked_rounds_match(sglang_ref):
    # The rounds of test_sglang_ref.py, through the model too.
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
        assert run_model_round(s) == sglang_ref.run(s), json.dumps(s)
