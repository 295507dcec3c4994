"""The incident re-executed on a real (scaled) KV cache: the allocator, which never reads
the model's verdict, must run out of memory exactly where the postmortem says."""

from __future__ import annotations

import pytest
import torch

from kvforensics.exec import execute, plan_from_scenario
from kvforensics.exec.plan import ExecOom
from tests.exec.conftest import POSTMORTEM

INCIDENT_OOM = ExecOom(round=3, rid="as-1keim4u1e8", tokens=2056, available=0)


def test_prefix_runs_out_of_memory_as_logged(incident_plans):
    res = execute(incident_plans["prefix"], device="cpu")
    assert res.oom == INCIDENT_OOM
    assert res.oom_message == (
        "Prefill out of memory. Try to lower your batch size.\n"
        "Try to allocate 2056 tokens.\n"
        "Available full tokens: 0 (full_available_size=0 + full_evictable_size_=0)"
    )
    assert res.agrees_with_model
    assert res.integrity == []
    assert res.rounds == 4  # rounds 0..2 allocated, round 3 failed
    assert res.incomplete == ["as-1keim4u1e8"]


@pytest.mark.parametrize("policy", ["fixed", "upstream", "drain"])
def test_fixes_complete_with_intact_kv(incident_plans, policy):
    res = execute(incident_plans[policy], device="cpu")
    assert res.oom is None and res.model_oom is None and res.agrees_with_model
    assert res.integrity == []
    assert res.completed == sorted(incident_plans[policy].seq_lens)
    # memory really was recycled: the cache was evicted and its pages handed out again
    assert res.stats.pages_evicted > 0
    assert res.stats.pages_reused >= res.stats.pages_evicted


def test_the_oom_is_rederived_not_copied(incident_plans):
    """Hide the model's verdict: the executor still finds the same out-of-memory."""
    import dataclasses

    blind = dataclasses.replace(incident_plans["prefix"], model_oom=None)
    res = execute(blind, device="cpu")
    assert res.oom == INCIDENT_OOM and not res.agrees_with_model


@pytest.mark.slow  # the incident's plan executed twice more, on wider tensors
def test_scaling_keeps_the_oom_point(incident_plans):
    """Layers and width change bytes, never slots: the out-of-memory does not move."""
    for layers, kv_dim, rope_dim in ((1, 1, 0), (3, 16, 4)):
        res = execute(
            incident_plans["prefix"], device="cpu", layers=layers, kv_dim=kv_dim, rope_dim=rope_dim
        )
        assert res.oom == INCIDENT_OOM and res.integrity == []


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_dtypes(dtype):
    res = execute(plan_from_scenario(str(POSTMORTEM), "fixed"), device="cpu", dtype=dtype)
    assert res.oom is None and res.integrity == [] and res.agrees_with_model


def test_postmortem_example_with_unaligned_pool():
    """12000 slots is not a whole number of pages: the stray slots count as available
    (as the model counts them) but are never handed out."""
    res = execute(plan_from_scenario(str(POSTMORTEM), "prefix"), device="cpu")
    assert res.oom == ExecOom(round=2, rid="B", tokens=160, available=160)
    assert res.agrees_with_model and res.integrity == []
