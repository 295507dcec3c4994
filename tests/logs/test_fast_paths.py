"""The split and replace fast paths give exactly what the catalogue's regexes give."""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from kvforensics.logs import extract as ex
from kvforensics.logs import load_catalogue

CAT = load_catalogue()
FORMATS = {f.name: f for f in CAT.formats}

BATCH_TAILS = [
    "#new-seq: 4, #new-token: 12203, #cached-token: 6720, token usage: 0.10, cuda graph: False",
    "#new-seq: 4, #new-seq: 5, token usage: 1e-3, input throughput (token/s): 12.5",
    "#new-seq: x, #new-seq: 5",  # first occurrence unreadable: the regex takes the second
    "#new-seq: 5abc, token usage: inf, #queue-req: +7",
    "#new-seq:  6, token usage: .5, cuda graph: 'True'",
    "full token usage: 0.25, token usage: 0.5, mamba usage: 0.1",
    "full token usage: 0.25, #weird: 1, other thing, , #queue-req: 3, ",
    "cuda graph: True, x: 1, cuda graph: False",
    "cuda graph: None, #running-req: 1.0, #new-token: 99999999999999999999",
    "#new-seq: 1,#new-token: 2, token usage: 0.1.2",
    "",
    ", #new-seq: 3",
    "token usage: 1e5, #pending-token: -4, npu graph: yes, #inflight-req: 0, ",
    "unknown: a, b: 'c, d', #new-seq: 2",
]


def _ok(lines: list[str], fmt) -> pl.DataFrame:
    cand = pl.DataFrame({"text": lines}).with_row_index("idx")
    return ex._match(cand, fmt)


@pytest.mark.parametrize("name", ["prefill_batch", "decode_batch"])
def test_pairs_split_matches_key_regexes(name):
    fmt = FORMATS[name]
    head = "Prefill batch" if name == "prefill_batch" else "Decode batch"
    lines = [f"[2026-11-02 15:16:26 PP0] {head}, {t}" for t in BATCH_TAILS]
    lines += [f"{head}. {t}" for t in BATCH_TAILS]
    ok = _ok(lines, fmt)
    assert ok.height == len(lines)
    fast = ex._fields(ok, fmt).sort("idx")
    slow = ex._fields_regex(ok, fmt).sort("idx")
    assert_frame_equal(fast.select(slow.columns), slow)


def test_tail_group_replace_matches_capture():
    fmt = FORMATS["prefill_batch"]
    assert ex._tail_split(fmt.line_regex) is not None
    lines = [
        "[2026-11-02 15:16:26 PP0] Prefill batch, #new-seq: 1",
        "Prefill batch. a\r",
        "[x] Prefill batch; no",
        "[a] [b] Prefill batch, two brackets",
        "Prefill batch,",
        "Prefill batch, ",
        "xx Prefill batch, not at the start",
    ]
    cand = pl.DataFrame({"text": lines}).with_row_index("idx")
    got = ex._match(cand, fmt)
    want = cand.with_columns(pl.col("text").str.extract_groups(fmt.line_regex).alias("_g"))
    want = want.filter(pl.col("_g").struct.field("__m").is_not_null())
    assert got["idx"].to_list() == want["idx"].to_list()
    assert got["_g"].struct.field("pairs").to_list() == want["_g"].struct.field("pairs").to_list()


def test_no_fast_path_for_other_shapes():
    assert ex._tail_split(FORMATS["adder_check"].line_regex) is None
    assert ex._tail_split(FORMATS["memory_config"].line_regex) is None
    assert ex._splittable(FORMATS["prefill_batch"])
