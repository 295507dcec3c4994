"""Every excerpt parses to what its sidecar says: each out-of-memory message one `oom`
event with its numbers, retractions never `oom`, crashes with their exception line."""

from __future__ import annotations

import re

import polars as pl
import pytest

from kvforensics.logs import read_events
from tests.stock.corpus import excerpts, params

NUMBERS = {
    "phase": "oom_phase",
    "tokens": "oom_tokens",
    "available": "oom_available",
    "free": "oom_available_size",
    "evictable": "oom_evictable_size",
    "swa_available": "oom_swa_available",
    "mamba_available": "oom_mamba_available",
}


def _read(e):
    return read_events([e.log], extra_formats=e.formats or None)


@pytest.mark.parametrize("e", params())
def test_excerpt_events(e):
    df, summary = _read(e)
    counts = dict(df.group_by("kind").len().iter_rows())
    assert counts == e.expect["events"]
    assert summary.unmatched == e.expect.get("unmatched", 0)
    assert bool(summary.cut_lines) == e.expect.get("cut", False)
    assert df.filter(pl.col("kind") == "retract").height == e.expect["retractions"]
    assert df.filter(pl.col("kind") == "crash").height == e.expect["crashes"]


@pytest.mark.parametrize("e", [p for p in params() if p.values[0].expect.get("oom")])
def test_excerpt_oom_numbers(e):
    df, _ = _read(e)
    ooms = df.filter(pl.col("kind") == "oom").to_dicts()
    assert len(ooms) == len(e.expect["oom"])
    for got, want in zip(ooms, e.expect["oom"], strict=True):
        for key, col in NUMBERS.items():
            if key in want:
                assert got[col] == want[key], key


@pytest.mark.parametrize("e", [p for p in params() if "new_tokens" in p.values[0].expect])
def test_excerpt_batch_numbers(e):
    df, _ = _read(e)
    batches = df.filter(pl.col("kind") == "prefill_batch")
    assert batches["new_token"].to_list() == e.expect["new_tokens"]


@pytest.mark.parametrize("e", [p for p in params() if "crash_rank" in p.values[0].expect])
def test_excerpt_crash_rank(e):
    df, _ = _read(e)
    (crash,) = df.filter(pl.col("kind") == "crash").to_dicts()
    assert crash["rank"] == e.expect["crash_rank"]
    if "exception" in e.expect:
        assert crash["exception"] == e.expect["exception"]


@pytest.mark.parametrize("e", [p for p in params() if "rank" in p.values[0].expect])
def test_excerpt_rank_without_date(e):
    df, summary = _read(e)
    assert set(df["rank"].to_list()) == {e.expect["rank"]}
    if e.expect.get("undated"):
        assert df["time"].null_count() == df.height == summary.undated_events
        assert df["clock"].null_count() == 0


def test_corpus_size_and_spread():
    ex = excerpts()
    threads = {(e.source["repo"], e.source["thread"]) for e in ex}
    years = {e.source["year"] for e in ex}
    assert len(ex) >= 30 and len(threads) >= 20
    assert {2024, 2025, 2026} <= years
    assert all(e.source.get("url", "").startswith("https://github.com/") for e in ex)


_OOM_TEXT = re.compile(r"(?:Prefill |Decode )?[Oo]ut of memory\. ?Try to (?:lower|allocate)")
_RETRACT_TEXT = re.compile(r"out of memory happened|Retract requests")
# a device allocator's out-of-memory, the leak check: never a KV-pool `oom`
_NOT_KV_TEXT = re.compile(
    r"memory leak detected|(?:CUDA|NPU) out of memory\. Tried|CUDA error: out of memory"
    r"|OutOfResources|alloc_req_slots"
)


@pytest.mark.parametrize("e", params())
def test_no_retraction_is_an_oom_and_every_oom_message_is_one_event(e):
    df, _ = _read(e)
    ooms = df.filter(pl.col("kind") == "oom")
    assert not any(_RETRACT_TEXT.search(a or "") for a in ooms["attached"].to_list())
    heads = [x or "" for x in ooms["exception"].to_list()] if ooms.height else []
    assert not any(_NOT_KV_TEXT.search(h) for h in heads)
    text_all = e.log.read_text(encoding="utf-8")
    if _NOT_KV_TEXT.search(text_all) and not _OOM_TEXT.search(text_all):
        assert ooms.height == 0
    # messages in the file, a raised copy right under its logger line or in its
    # traceback counted once: each out-of-memory message starts a new message block
    text = e.log.read_text(encoding="utf-8")
    blocks = re.split(r"\n(?=\[|\S+ \S+ - )", text)
    with_oom = [b for b in blocks if _OOM_TEXT.search(b)]
    assert ooms.height == len(with_oom) == len(e.expect.get("oom", []))
