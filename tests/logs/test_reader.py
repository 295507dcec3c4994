"""Reading: incident lines with exact values, multi-file ranks, gzip, OOM attachments, damage."""

from __future__ import annotations

import gzip
import shutil
from datetime import datetime

import polars as pl
import pytest

from kvforensics.errors import InputError
from kvforensics.logs import read_events
from tests.logs._files import file_with


def _by_kind(df: pl.DataFrame, kind: str) -> list[dict]:
    return df.filter(pl.col("kind") == kind).to_dicts()


def test_incident_lines_exact(samples):
    df, s = read_events([samples / "incident-pp0.log"])
    adds = _by_kind(df, "adder_check")
    assert [
        (
            a["rid"],
            a["seq_len"],
            a["prefix_len"],
            a["host_hit_len"],
            a["rem_chunk_tokens"],
            a["baseline"],
            a["rem_total_tokens"],
            a["cur_rem_tokens"],
        )
        for a in adds
    ] == [
        ("as-v9ujq2m0c1", 13888, 0, 0, 16384, 121408, 121408, 121408),
        ("as-1keim4u1e8", 94024, 12992, 73792, 2496, 108416, 94463, 94464),
        ("as-xpkq7d03n5", 15545, 0, 15360, 192, 34624, 18303, 18304),
    ]
    res = _by_kind(df, "adder_result")
    assert [
        (r["rid"], r["decision"], r["extend_start"], r["extend_end"], r["result"]) for r in res
    ] == [
        ("as-v9ujq2m0c1", "full", 0, 13888, "CONTINUE"),
        ("as-1keim4u1e8", "truncated", 86784, 89088, "CONTINUE"),
        ("as-xpkq7d03n5", "full", 15360, 15545, "OTHER"),
    ]
    loads = _by_kind(df, "hicache_load_back")
    assert [(x["rid"], x["host_hit_len"], x["loaded"]) for x in loads] == [
        ("as-1keim4u1e8", 73792, 73792),
        ("as-xpkq7d03n5", 15360, 15360),
    ]
    writes = [(w["rid"], w["blocks"], w["block_size"]) for w in _by_kind(df, "as_write")]
    assert ("as-1keim4u1e8", 348, 256) in writes and ("as-1keim4u1e8", 359, 256) in writes
    (align,) = _by_kind(df, "checkpoint_align")
    assert (align["align_size"], align["align_backend"]) == (256, "FlashKDA")
    (args,) = _by_kind(df, "server_args")
    assert (
        args["page_size"],
        args["chunked_prefill_size"],
        args["max_prefill_tokens"],
        args["disaggregation_mode"],
        args["pp_size"],
        args["tp_size"],
    ) == (64, 16384, 16384, "prefill", 4, 1)
    (mem,) = _by_kind(df, "memory_config")
    assert (
        mem["max_total_num_tokens"],
        mem["max_running_requests"],
        mem["context_len"],
        mem["available_gpu_mem_gb"],
    ) == (262144, 256, 1048576, 12.31)
    assert set(df["rank"].unique()) == {"PP0"} and set(df["pp"].unique()) == {0}
    assert adds[1]["time"] == datetime(2026, 11, 2, 15, 16, 26)
    assert df["line"].to_list() == sorted(df["line"].to_list())
    assert s.unmatched == 0


def test_oom_is_one_event_with_attachment(samples):
    df, s = read_events([samples / "incident-pp0.log"])
    (oom,) = _by_kind(df, "oom")
    assert oom["line"] == 16
    assert (
        oom["oom_phase"],
        oom["oom_tokens"],
        oom["oom_available"],
        oom["oom_available_size"],
        oom["oom_evictable_size"],
    ) == ("Prefill", 2056, 0, 0, 0)
    att = oom["attached"].split("\n")
    assert att[0] == "Try to allocate 2056 tokens."
    assert att[2] == "|-- root [0, 0) lock_ref=3"  # tree dump
    assert att[4].startswith("[2026-11-02 15:16:29 PP0] Scheduler hit an exception: Traceback")
    assert "RuntimeError: Prefill out of memory. Try to lower your batch size." in att
    # the Scheduler line is part of the event, not an event or an unmatched line of its own
    assert df.height == 16 and s.unmatched == 0
    assert s.attached_lines == 14


def test_oom_typo_and_hybrid_variants(samples):
    df, _ = read_events([samples / "era-2024-11-typo-oom.log", samples / "era-2026-07-hybrid.log"])
    a, b = _by_kind(df, "oom")
    assert (
        a["oom_tokens"],
        a["oom_available"],
        a["oom_available_size"],
        a["oom_evictable_size"],
    ) == (1500, 900, 100, 800)
    assert (
        b["oom_tokens"],
        b["oom_available"],
        b["oom_available_size"],
        b["oom_evictable_size"],
        b["oom_swa_available"],
        b["oom_lru_evictable"],
    ) == (4096, 3000, 1000, 2000, 700, 2000)
    # the 2024 batch line's `cache hit rate` is typed (percent as printed)
    (batch,) = [r for r in _by_kind(df, "prefill_batch") if r["time"].year == 2024]
    assert batch["cache_hit_pct"] == 0.0 and batch["extra"] is None
    assert batch["queue_req"] == 3


def test_multi_file_ranks(samples, tmp_path):
    files = [samples / f"incident-pp{i}.log" for i in (0, 1, 3)]
    df, s = read_events(files)
    per_file = df.group_by("file").agg(pl.col("rank").unique()).sort("file")
    assert {f: set(r) for f, r in per_file.iter_rows()} == {
        str(files[0]): {"PP0"},
        str(files[1]): {"PP1"},
        str(files[2]): {"PP3"},
    }
    assert [f.ranks for f in s.files] == [{"PP0"}, {"PP1"}, {"PP3"}]
    plan = _by_kind(df, "replay_plan")[0]
    assert plan["rids"] == ["as-v9ujq2m0c1", "as-1keim4u1e8", "as-xpkq7d03n5"]
    assert plan["extend_tokens"] == 16377 and plan["pp"] == 1
    batches = _by_kind(df, "prefill_batch")
    assert [b["new_token"] for b in batches] == [16377, 2816]
    assert all(b["pp"] == 3 and b["cuda_graph"] is False for b in batches)
    # line numbers restart per file
    assert df.filter(pl.col("file") == str(files[1]))["line"].to_list() == [1, 2]
    # a file's rank is whatever its lines say, not its name
    mixed = tmp_path / "whatever.log"
    mixed.write_text(
        (samples / "incident-pp1.log").read_text() + (samples / "incident-pp3.log").read_text()
    )
    df2, _ = read_events([mixed])
    assert df2["rank"].to_list() == ["PP1", "PP1", "PP3", "PP3"]


def test_gzip_by_magic_not_name(samples, tmp_path):
    plain = samples / "incident-pp0.log"
    gz = tmp_path / "rank0.log"  # no .gz suffix
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    want, _ = read_events([plain])
    got, s = read_events([gz])
    assert s.files[0].gzip
    assert got.drop("file").equals(want.drop("file"))
    # a .gz name on a plain file is read as plain text
    fake = tmp_path / "plain.log.gz"
    shutil.copy(plain, fake)
    got2, s2 = read_events([fake])
    assert not s2.files[0].gzip and got2.height == want.height


def test_concatenated_gzip_members(samples, tmp_path):
    a = (samples / "incident-pp1.log").read_bytes()
    b = (samples / "incident-pp3.log").read_bytes()
    p = tmp_path / "rotated.gz"
    p.write_bytes(gzip.compress(a) + gzip.compress(b))
    df, s = read_events([p])
    assert df["rank"].to_list() == ["PP1", "PP1", "PP3", "PP3"] and not s.gaps


def test_truncated_gzip_reads_what_it_can(samples, tmp_path):
    data = (samples / "incident-pp0.log").read_bytes() * 200
    blob = gzip.compress(data)
    p = tmp_path / "cut.gz"
    p.write_bytes(blob[: len(blob) // 2])
    df, s = read_events([p])
    assert df.height > 0
    assert any("ends early" in g for g in s.gaps)


def test_corrupt_gzip_reads_what_it_can(samples, tmp_path):
    data = (samples / "incident-pp0.log").read_bytes() * 200
    blob = bytearray(gzip.compress(data))
    mid = len(blob) // 2
    blob[mid : mid + 64] = b"\xff" * 64
    p = tmp_path / "bad.gz"
    p.write_bytes(bytes(blob))
    df, s = read_events([p])
    assert df.height > 0
    assert any("corrupt gzip" in g for g in s.gaps)


def test_cut_last_line_and_invalid_utf8(tmp_path):
    p = tmp_path / "cut.log"
    p.write_bytes(
        b"[2026-11-02 15:16:26 PP0] HiCache load back: rid=as-\xff\xfe1, host_hit_len=64, loaded=64\n"
        b"\xc3\x28 garbage line\n"
        b"[2026-11-02 15:16:27 PP0] HiCache load back: rid=as-1, host_hit_len=73792, loaded=737"
    )
    df, s = read_events([p])
    assert df["rid"].to_list() == ["as-\ufffd\ufffd1", "as-1"]
    # the cut line still matches, with a value that may be short: it is flagged
    assert df["loaded"].to_list() == [64, 737]
    assert df["truncated"].to_list() == [False, True]
    assert s.files[0].cut_last_line and s.cut_lines == [str(p)]
    assert s.unmatched == 1 and s.unmatched_samples[0][1] == 2


def test_unmatched_counted_and_sampled(tmp_path):
    p = tmp_path / "noise.log"
    p.write_text("".join(f"noise {i}\n" for i in range(50)) + "\n\n")
    df, s = read_events([p])
    assert df.height == 0
    assert s.unmatched == 50 and s.blank_lines == 2
    assert [n for _, n, _ in s.unmatched_samples] == [1, 2, 3, 4, 5]


def test_decode_node_detected(samples):
    _, s = read_events([samples / "decode-node.log"])
    assert s.decode_node and s.matched["decode_batch"] == 2
    _, s2 = read_events([samples / "incident-pp3.log"])
    assert not s2.decode_node


def test_long_line_and_nul_bytes(tmp_path):
    p = tmp_path / "long.log"
    long = "x" * (3 << 20)
    p.write_bytes(
        f"[2026-11-02 15:16:26 PP0] {long}\n".encode()
        + b"A" * 70000
        + b"\n"  # keep the NULs below out of the sniffed head
        + b"\x00\x00[2026-11-02 15:16:27 PP0] AttentionStore write: rid=as-1, blocks=3, block_size=256\n"
    )
    df, s = read_events([p], chunk_bytes=1 << 20)
    assert df["line"].to_list() == [3] and df["blocks"].to_list() == [3]
    sample = s.unmatched_samples[0][2]
    # the sample keeps the line's head and says how much of it was left out
    assert s.unmatched == 2 and sample.startswith("[2026-11-02 15:16:26 PP0] xxx")
    assert sample.endswith(f"…({len(long) + 26 - 300} more characters)")
    assert s.gaps == [f"{p}: 2 NUL bytes (binary data) dropped"]


@pytest.mark.parametrize(
    ("setup", "msg"),
    [
        (lambda d: d / "missing.log", "no such file"),
        (lambda d: d, "is a directory"),
        (file_with("e.log", b""), "empty file"),
        (file_with("b.bin", bytes(range(256)) * 100), "binary data"),
    ],
)
def test_unreadable_inputs_raise_one_line(tmp_path, setup, msg):
    with pytest.raises(InputError, match=msg) as exc:
        read_events([setup(tmp_path)])
    assert "\n" not in str(exc.value)
