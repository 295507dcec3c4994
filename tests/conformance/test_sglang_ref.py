"""Hand-checked rounds through SGLang 0.5.23's real PrefillAdder.

Selected only with `pytest -m conformance` (deselected by default in pyproject):
they need the `.venv-sglang` reference environment from scripts/conformance_env.sh.
Arithmetic in the comments: the allocator stand-in is page-granular, so 12000 free
tokens at page 64 are 187 pages = 11968 tokens.
"""

import copy

import pytest

from ._specs import POSTMORTEM_ABC

pytestmark = pytest.mark.conformance

ABC = POSTMORTEM_ABC


def spec(**changes):
    s = copy.deepcopy(ABC)
    s.update(changes)
    return s


def brief(records):
    return [
        (r["call"], r["rid"], r["decision"], r["start"], r["end"], r["result"]) for r in records
    ]


def test_postmortem_abc_upstream(sglang_ref):
    recs = sglang_ref.run(ABC)
    # A whole; B truncated at the chunk budget (3008 is a page multiple); chunk
    # budget 0 -> OTHER; C is never examined.
    assert brief(recs) == [
        ("add_one_req", "A", "full", 0, 1088, "CONTINUE"),
        ("add_one_req", "B", "truncated", 0, 3008, "OTHER"),
    ]
    a, b = recs
    # A: 1088 + 64 (page) + 1 (max_new) to total, 1088 + 64 to current.
    assert (a["rem_total_offset"], a["cur_offset"]) == (1153, 1152)
    assert (a["rem_total_tokens"], a["cur_rem_tokens"], a["rem_chunk_tokens"]) == (
        11968 - 1153,
        11968 - 1152,
        3008,
    )
    # B truncated: 3008 + 64 to both offsets, no max_new, tail not reserved.
    assert (b["rem_total_offset"], b["cur_offset"]) == (1153 + 3072, 1152 + 3072)
    assert b["rem_chunk_tokens"] == 0 and b["load_back"] == 0


def test_truncation_align_leaves_budget_for_host_load_back(sglang_ref):
    # flashinfer-style truncation_align_size 1024: B's piece floors 3008 -> 2048,
    # 960 of chunk budget is left; C (128 to compute, 6000 on host) fits whole.
    recs = sglang_ref.run(spec(truncation_align_size=1024))
    assert brief(recs) == [
        ("add_one_req", "A", "full", 0, 1088, "CONTINUE"),
        ("add_one_req", "B", "truncated", 0, 2048, "CONTINUE"),
        ("add_one_req", "C", "full", 6000, 6128, "CONTINUE"),
    ]
    c = recs[2]
    assert c["load_back"] == 6000
    # Load-back took ceil(6000/64) = 94 pages from the pool at once (baseline
    # 11968 -> 5952); C's offsets: 128 + 64 (+1 to total).
    assert c["rem_total_offset"] == 1153 + 2112 + 193
    assert c["rem_total_tokens"] == 5952 - c["rem_total_offset"]
    assert c["rem_chunk_tokens"] == 4096 - 1088 - 2048 - 128


def test_resumed_chunk_forced_when_no_memory(sglang_ref):
    # Nothing free: min(rem_chunk, rem_total) <= 0, so the piece is the whole
    # chunk budget (forced branch), truncated at 3008 + 4096, not page-floored.
    recs = sglang_ref.run(spec(free=0, chunked={"rid": "B", "seq_len": 8000, "start": 3008}))
    r = recs[0]
    assert (r["call"], r["decision"], r["start"], r["end"]) == (
        "add_chunked_req",
        "resumed",
        3008,
        7104,
    )
    assert (r["rem_total_offset"], r["cur_offset"]) == (4160, 4160)
    assert r["rem_total_tokens"] == -4160 and r["rem_chunk_tokens"] == 0
    # Chunk budget spent -> budget_state() is NO_TOKEN (memory is checked first),
    # so 0.5.23's loop still calls add_one_req once, which answers NO_TOKEN.
    assert brief(recs[1:]) == [("add_one_req", "A", "rejected", None, None, "NO_TOKEN")]


def test_resumed_chunk_memory_limited_piece(sglang_ref):
    # 1000 free -> 960 usable: the resumed piece is min(4096, 960) = 960 tokens.
    s = spec(free=1000, chunked={"rid": "B", "seq_len": 8000, "start": 3008})
    recs = sglang_ref.run(s)
    assert brief(recs)[0] == ("add_chunked_req", "B", "resumed", 3008, 3968, None)
    assert recs[0]["rem_total_tokens"] == 960 - 1024
    assert brief(recs[1:]) == [("add_one_req", "A", "rejected", None, None, "NO_TOKEN")]
    # The fork's rule (skip the queue unless CONTINUE) prints no add_one_req.
    assert len(sglang_ref.run(dict(s, skip_rule="not_continue"))) == 1


def test_last_piece_charges_max_new_and_leaves_budget(sglang_ref):
    s = spec(
        free=20000, chunked={"rid": "B", "seq_len": 8000, "start": 6016}, queue=[ABC["queue"][0]]
    )
    recs = sglang_ref.run(s)
    r, a = recs
    assert (r["start"], r["end"], r["rem_total_offset"], r["cur_offset"]) == (
        6016,
        8000,
        1984 + 64 + 1,
        1984 + 64,
    )
    assert (a["decision"], a["rem_chunk_tokens"]) == ("full", 4096 - 1984 - 1088)


def test_locking_an_evictable_prefix_lowers_the_baseline(sglang_ref):
    q = {"rid": "D", "seq_len": 1500, "device_prefix": 640, "host_hit": 0, "prefix_evictable": True}
    recs = sglang_ref.run(spec(free=2000, evictable=1000, queue=[q]))
    d = recs[0]
    # baseline while D holds its lock: 1984 free + (1000 - 640) evictable.
    assert (d["decision"], d["start"], d["end"]) == ("full", 640, 1500)
    assert d["rem_total_tokens"] == 1984 + 360 - (896 + 64 + 1)
    # Memory check is strict: extend + 1 + page must be < rem_total after the lock.
    q2 = dict(q, seq_len=640 + 2344 - 65)  # extend + 65 == 2344: rejected
    assert sglang_ref.run(spec(free=2000, evictable=1000, queue=[q2]))[0]["result"] == "NO_TOKEN"
    q3 = dict(q2, seq_len=q2["seq_len"] - 1)
    assert sglang_ref.run(spec(free=2000, evictable=1000, queue=[q3]))[0]["decision"] == "full"


def test_bad_spec_is_reported(sglang_ref):
    with pytest.raises(ValueError):
        sglang_ref.run(spec(queue=[dict(ABC["queue"][0], device_prefix=2000)]))


def test_no_one_chunked_guard_outside_shortest_prefill_first(sglang_ref):
    # truncation_align_size 100 at page 64: X's piece is 4096 -> 4000 -> end 3968,
    # 128 chunk tokens stay; Y is truncated too (128 -> 100 -> end 64). Under fcfs
    # 0.5.23 admits a second chunked request in the same batch.
    q = [
        {"rid": r, "seq_len": 9000, "device_prefix": 0, "host_hit": 0, "prefix_evictable": True}
        for r in ("X", "Y")
    ]
    recs = sglang_ref.run(spec(free=100000, truncation_align_size=100, queue=q))
    assert brief(recs) == [
        ("add_one_req", "X", "truncated", 0, 3968, "CONTINUE"),
        ("add_one_req", "Y", "truncated", 0, 64, "CONTINUE"),
    ]
