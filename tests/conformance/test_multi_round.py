"""Multi-round differential: SGLang 0.5.23's real prefill path (``sglang_multi.py``) and
the model drive the same node over many rounds (``multi_round.py``), compared round by
round.

The property test runs the whole trace domain: shared prefixes, chunked requests, pools
from a third of the demand up, outside allocations. The hand-made runs below are the
smallest cases of what the model once missed (a prefix published at a checkpoint, whole
leaves evicted, the partial last page freed, a duplicate freed at the checkpoint), held
to the reference with the numbers said out loud. Runs per test: ``KVF_MULTI_RUNS``
(default 200); ``scripts/conformance.py --multi-round`` runs as many as asked.
"""

from __future__ import annotations

import json
import os

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings

from kvforensics.logs import read_events
from kvforensics.logs.release import detect_release
from kvforensics.rounds.batches import batch_rounds

from .multi_round import compare_run, model_run, oom_numbers, run_specs
from .reference_client import MULTI_SCRIPT, ReferenceUnavailable, SglangReference

pytestmark = pytest.mark.conformance

RUNS = int(os.environ.get("KVF_MULTI_RUNS", "200"))


@pytest.fixture(scope="module")
def multi_ref():
    try:
        ref = SglangReference(script=MULTI_SCRIPT)
    except ReferenceUnavailable as exc:
        pytest.fail(str(exc))
    yield ref
    ref.close()


@settings(
    max_examples=RUNS,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    print_blob=True,
)
@given(spec=run_specs())
def test_model_matches_sglang_over_rounds(multi_ref, spec):
    out = compare_run(multi_ref, spec)
    assert not out.diffs, (
        "model differs from SGLang 0.5.23's prefill path\nrun_spec = "
        + json.dumps(spec) + "\n" + "\n".join(out.diffs)
    )  # fmt: skip


def _run(**changes) -> dict:
    spec = {
        "page_size": 16, "pool_size": 512, "chunked_prefill_size": 512,
        "max_prefill_tokens": 16384, "max_new_tokens": 1, "transfer_rounds": 1,
        "block_size": 64, "rounds": 6, "outside": [],
        "requests": [{"rid": "a", "arrive": 0, "seq_len": 250, "blocks": [1, 2, 3, 4]}],
    }  # fmt: skip
    spec.update(changes)
    return spec


@pytest.mark.parametrize("page, wording", [(1, "Out of memory."), (16, "Prefill out of memory.")])
def test_outside_allocation_between_admission_and_allocation_is_the_same_oom(
    multi_ref, page, wording, tmp_path
):
    # 512 slots; the adder admits all 250 tokens; then an outside user takes 320 before
    # the batch allocates: 192 are left. SGLang raises its own error, the model the same.
    spec = _run(page_size=page, outside=[{"round": 0, "tokens": 320, "rounds": 3, "during": True}])
    ref = multi_ref.run(spec)
    printed = multi_ref.last_printed
    got = model_run(spec)
    assert len(ref) == len(got) == 1
    assert oom_numbers(ref[0]["oom"]) == got[0]["oom"] == [250, 192, 0]
    assert ref[0]["oom"].startswith(wording) and any(wording in x for x in printed)
    # kvforensics reads SGLang's own message, as its logger writes it, to the same numbers.
    log = tmp_path / "tp0.log"
    log.write_text("[2026-12-01 11:00:00 TP0] " + ref[0]["oom"])
    events, _ = read_events([log])
    oom = events.filter(pl.col("kind") == "oom").row(0, named=True)
    assert [oom["oom_tokens"], oom["oom_available_size"], oom["oom_evictable_size"]] == got[0]["oom"]


def _record(rounds: list[dict], now: int, rid: str) -> dict:
    return next(c for c in rounds[now]["calls"] if c["rid"] == rid)


def test_prefix_published_at_checkpoint(multi_ref):
    # b shares a's first two 64-token blocks. a's first chunk (256 tokens) enters the radix
    # tree when it is computed, so in round 1 b finds 128 tokens on the device (locked by
    # a, so they are not evictable) while a is still in prefill.
    spec = _run(chunked_prefill_size=256, pool_size=2048, rounds=4, requests=[
        {"rid": "a", "arrive": 0, "seq_len": 300, "blocks": [0, 1, 2, 3, 4]},
        {"rid": "b", "arrive": 1, "seq_len": 200, "blocks": [0, 1, 5, 6]}])  # fmt: skip
    ref, got = multi_ref.run(spec), model_run(spec)
    assert _record(ref, 1, "b")["start"] == _record(got, 1, "b")["start"] == 128
    assert not compare_run(multi_ref, spec).diffs


def test_eviction_takes_whole_leaves(multi_ref):
    # a (192 tokens, released after its transfer) is the only cache; 320 of 512 slots are
    # free until an outside user takes 240 between b's admission and its allocation. The
    # allocation asks for 256 + 16 (a page per request) against 80 free, so the tree must
    # free 192 and takes a's whole leaf (not just the 176 that b's 256 are short).
    spec = _run(requests=[
        {"rid": "a", "arrive": 0, "seq_len": 192, "blocks": [1, 2, 3]},
        {"rid": "b", "arrive": 2, "seq_len": 256, "blocks": [4, 5, 6, 7]}],
        outside=[{"round": 2, "tokens": 240, "rounds": 3, "during": True}])  # fmt: skip
    ref, got = multi_ref.run(spec), model_run(spec)
    assert ref[2]["evicted"] == got[2]["evicted"] == 192
    assert not compare_run(multi_ref, spec).diffs


def test_partial_last_page_is_freed_at_release(multi_ref):
    # 250 tokens on 16-token pages: 16 pages allocated (256 of 512 free after round 0);
    # when the transfer ends (round 1), 15 whole pages (240 tokens) stay in the tree and
    # the 16th, holding 10 tokens, goes back to free: 272 free, 240 evictable.
    spec = _run(rounds=3)
    ref, got = multi_ref.run(spec), model_run(spec)
    want = [(256, 0), (272, 240), (272, 240)]
    assert [(r["free"], r["evictable"]) for r in ref] == want
    assert [(r["free"], r["evictable"]) for r in got] == want
    assert not compare_run(multi_ref, spec).diffs


def test_duplicate_prefix_in_one_batch_is_freed_at_checkpoint(multi_ref):
    # a and b arrive together and share two blocks that neither finds cached: both compute
    # them; at the checkpoint the tree keeps a's copy and b's 128 slots go back to free.
    spec = _run(pool_size=1024, rounds=3, requests=[
        {"rid": "a", "arrive": 0, "seq_len": 192, "blocks": [0, 1, 2]},
        {"rid": "b", "arrive": 0, "seq_len": 192, "blocks": [0, 1, 3]}])  # fmt: skip
    ref, got = multi_ref.run(spec), model_run(spec)
    # round 1: both in transfer, locking 128 shared + 64 each = 256 protected, 768 free
    assert ref[1]["free"] == got[1]["free"] == 1024 - 256
    assert not compare_run(multi_ref, spec).diffs


def test_real_prefill_batch_lines_read_to_the_models_batches(multi_ref, tmp_path):
    # SGLang's own `Prefill batch` lines (report_prefill_stats on the batch's PrefillStats),
    # rebuilt by kvforensics as a stock log's batch-level rounds: #new-seq, #new-token and
    # #cached-token are the model's batches, round by round (a chunked request over three rounds, a finished one released
    # and the next request admitted).
    spec = _run(chunked_prefill_size=128, pool_size=4096, rounds=8, requests=[
        {"rid": "a", "arrive": 0, "seq_len": 300, "blocks": [0, 1, 2, 3, 4]},
        {"rid": "b", "arrive": 1, "seq_len": 200, "blocks": [5, 6, 7, 8]},
        {"rid": "c", "arrive": 4, "seq_len": 64, "blocks": [9]}])  # fmt: skip
    ref = multi_ref.run(spec)
    lines = [r["prefill_batch"] for r in ref if r.get("prefill_batch")]
    log = tmp_path / "tp0.log"
    log.write_text("".join(f"[2026-12-01 11:00:{i:02d} TP0] {x}\n" for i, x in enumerate(lines)))
    events, _ = read_events([log])
    rounds = batch_rounds(events).rounds  # the stock log's batch-level rounds
    got = [(r.values.new_seq, r.values.new_token, r.values.cached_token) for r in rounds]
    model = [r for r in model_run(spec) if r["pieces"]]
    want = [(len(r["pieces"]), r["new_token"],
             sum(c["start"] for c in r["calls"] if c["call"] == "add_one_req" and c["start"]))
            for r in model]  # fmt: skip
    assert len(lines) == 5 and got == want
    # and the lines tell their release: 0.5.23's PD prefill line has #optimistic-req
    ev, notes = detect_release([log])
    assert (ev.how, ev.lo, ev.hi, notes) == ("lines", (0, 5, 16), None, [])
