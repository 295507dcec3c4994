"""Property: however an out-of-memory message is printed or pasted, it is one `oom` event
with its numbers, and the pool arithmetic reads the same mechanism from it."""

from __future__ import annotations

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvforensics.logs import load_catalogue
from kvforensics.logs.samples import parse_sample

CAT = load_catalogue()
TRACE = (
    '  File "/sgl/python/sglang/srt/mem_cache/allocation.py", line 188, in alloc_for_extend\n'
    "    out_cache_loc = alloc_token_slots(batch.tree_cache, batch.extend_num_tokens)"
)


def _sizes(spelling: str, a: int, e: int) -> list[str]:
    if spelling == "typo":
        return [
            f"Avaliable tokens: {a + e}",
            f"self.token_to_kv_pool_allocator.available_size()={a}",
            f"self.tree_cache.evictable_size()={e}",
        ]
    if spelling == "full":
        return [
            f"Available full tokens: {a + e} (full_available_size={a} + full_evictable_size_={e})"
        ]
    return [f"Available tokens: {a + e} (available_size={a} + evictable_size={e})"]


def _render(form: str, phase: str | None, n: int, a: int, e: int, spelling: str) -> str:
    head = f"{phase} out of memory" if phase else "Out of memory"
    msg = [
        f"{head}. Try to lower your batch size.",
        f"Try to allocate {n} tokens.",
        *_sizes(spelling, a, e),
    ]
    stamp = "[2026-02-03 04:05:06 TP1] "
    if form == "logged":  # the logger's line, a tree dump, the scheduler's report with the copy
        return "\n".join(
            [
                stamp + msg[0],
                *msg[1:],
                "|-- root [0, 0) lock_ref=1",
                stamp + "Scheduler hit an exception: Traceback (most recent call last):",
                TRACE,
                "RuntimeError: " + msg[0],
                *msg[1:],
            ]
        )
    if form == "report":  # only the scheduler's report
        return "\n".join(
            [
                stamp + "Scheduler hit an exception: Traceback (most recent call last):",
                TRACE,
                "RuntimeError: " + msg[0],
                *msg[1:],
            ]
        )
    if form == "joined":
        return "\n".join(["RuntimeError: " + msg[0] + " " + msg[1], *msg[2:]])
    if form == "flat":
        return "RuntimeError: " + "".join(msg)
    return "\n".join(["RuntimeError: " + msg[0], *msg[1:]])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    form=st.sampled_from(["logged", "report", "joined", "flat", "raised"]),
    phase=st.sampled_from(["Prefill", "Decode", None]),
    spelling=st.sampled_from(["typo", "full", "plain"]),
    n=st.integers(1, 10**7),
    a=st.integers(0, 10**7),
    e=st.integers(0, 10**7),
    retract_before=st.booleans(),
)
def test_every_form_is_one_oom_event(form, phase, spelling, n, a, e, retract_before):
    text = _render(form, phase, n, a, e, spelling)
    if retract_before:  # a retraction is never an out-of-memory
        text = (
            "[2026-02-03 04:05:05 TP1] Decode out of memory happened. #retracted_reqs: 2, "
            "#new_token_ratio: 0.5 -> 0.6\n" + text
        )
    events, unmatched = parse_sample(CAT, text)
    ooms = events.filter(pl.col("kind") == "oom").to_dicts()
    assert len(ooms) == 1 and unmatched == 0
    (o,) = ooms
    assert (o["oom_phase"], o["oom_tokens"], o["oom_available"]) == (phase, n, a + e)
    assert (o["oom_available_size"], o["oom_evictable_size"]) == (a, e)
    assert events.filter(pl.col("kind") == "retract").height == int(retract_before)
    assert events.filter(pl.col("kind") == "crash").height == 0


@settings(max_examples=60, deadline=None)
@given(
    exc=st.sampled_from(
        ["AssertionError", "NotImplementedError", "ValueError", "torch.OutOfMemoryError"]
    ),
    msg=st.sampled_from(
        [
            "",
            ": assert self.chunked_req is None",
            ": CUDA out of memory. Tried to allocate 2.00 GiB",
        ]
    ),
    chained=st.booleans(),
)
def test_other_scheduler_exceptions_are_crashes_with_their_line(exc, msg, chained):
    lines = [
        "[2026-02-03 04:05:06 TP3] Scheduler hit an exception: Traceback (most recent call last):",
        TRACE,
    ]
    if chained:  # the first exception, then the one the scheduler died of
        lines += [
            "KeyError: 'rid'",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            TRACE,
        ]
    lines.append(exc + msg)
    events, unmatched = parse_sample(CAT, "\n".join(lines))
    (row,) = events.to_dicts()
    assert (row["kind"], row["exception"], row["rank"]) == ("crash", exc + msg, "TP3")
    assert unmatched == 0
