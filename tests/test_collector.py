"""The collector's pace is raised for a run and put back after, even when the run fails."""

import gc

import pytest

from kvforensics.collector import fewer_collections


def test_threshold_raised_inside_and_restored_after():
    before = gc.get_threshold()
    with fewer_collections(123_456):
        assert gc.get_threshold() == (max(before[0], 123_456), *before[1:])
    assert gc.get_threshold() == before


def test_restored_when_the_pass_raises():
    before = gc.get_threshold()
    with pytest.raises(KeyError, match="boom"), fewer_collections(99_999):
        raise KeyError("boom")
    assert gc.get_threshold() == before


def test_never_collects_more_often_than_already_set():
    before = gc.get_threshold()
    gc.set_threshold(200_000, *before[1:])
    try:
        with fewer_collections(1_000):
            assert gc.get_threshold()[0] == 200_000
    finally:
        gc.set_threshold(*before)


def test_a_model_run_goes_at_the_raised_pace_and_restores_it():
    from kvforensics.collector import PASS_THRESHOLD
    from kvforensics.model import Config, PagePool, PrefillNode, Request, get_policy

    cfg = Config(page_size=1, chunked_prefill_size=64, max_prefill_tokens=64, pool_size=1024)
    pool = PagePool(page_size=1, size=1024, free=1024)
    node = PrefillNode(cfg, get_policy("prefix"), pool, waiting=[Request("q", 200)])
    before, seen = gc.get_threshold(), []
    res = node.run(on_round=lambda n: seen.append(gc.get_threshold()[0]))
    assert len(res.rounds) == 4 and seen and min(seen) >= PASS_THRESHOLD
    assert gc.get_threshold() == before
