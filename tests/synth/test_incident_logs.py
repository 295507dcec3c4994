"""The synthetic log fixtures: they parse, carry the incident's numbers, agree across
ranks, and regenerate byte for byte."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import polars as pl
import pytest

from kvforensics.logs import read_events
from kvforensics.scenario import load_scenario
from kvforensics.synth import Capture, Clock, capture_run, pp0_lines, pp1_lines

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "fixtures" / "logs"
INCIDENT = LOGS / "incident"
R = "2026-11-02 15:16:26"
A, B, C = "as-v9ujq2m0c1", "as-1keim4u1e8", "as-xpkq7d03n5"


def _script():
    path = ROOT / "scripts" / "make_incident_logs.py"
    spec = importlib.util.spec_from_file_location("make_incident_logs", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def pp0():
    ev, summary = read_events([INCIDENT / "pp0.log"])
    return ev, summary


def _at(ev: pl.DataFrame, second: str) -> pl.DataFrame:
    return ev.filter(pl.col("time").dt.strftime("%Y-%m-%d %H:%M:%S") == second)


def _since(ev: pl.DataFrame, second: str) -> pl.DataFrame:
    return ev.filter(pl.col("time").dt.strftime("%Y-%m-%d %H:%M:%S") >= second)


def test_pp0_parses_with_only_startup_noise_unmatched(pp0):
    ev, summary = pp0
    assert summary.lines > 20_000
    assert not summary.gaps and not summary.cut_lines
    first_round = ev.filter(pl.col("kind") == "adder_check")["line"].min()
    # the only unmatched lines are the startup lines no format describes
    assert summary.unmatched == 3
    assert all(n < first_round for _f, n, _t in summary.unmatched_samples)
    assert summary.matched["oom"] == 1
    tail = _since(ev, R)
    assert tail["kind"].to_list() == [
        *["adder_check", "adder_result"],
        *["adder_check", "hicache_load_back", "adder_result"] * 2,
        *["as_write"] * 3,
        "oom",
    ]


def test_incident_lines_carry_the_spec_numbers(pp0):
    ev, _ = pp0
    checks = _at(ev, R).filter(pl.col("kind") == "adder_check")
    assert checks["rid"].to_list() == [A, B, C]
    assert checks["baseline"].to_list() == [121408, 108416, 34624]
    assert checks["rem_total_tokens"].to_list()[1:] == [94463, 18303]
    assert checks["cur_rem_tokens"].to_list()[1:] == [94464, 18304]
    assert checks["rem_chunk_tokens"].to_list() == [16384, 2496, 192]
    res = _at(ev, R).filter(pl.col("kind") == "adder_result")
    assert res.select("decision", "extend_start", "extend_end", "result").rows() == [
        ("full", 0, 13888, "CONTINUE"),
        ("truncated", 86784, 89088, "CONTINUE"),
        ("full", 15360, 15545, "OTHER"),
    ]
    loads = _at(ev, R).filter(pl.col("kind") == "hicache_load_back")
    assert loads.select("rid", "loaded").rows() == [(B, 73792), (C, 15360)]
    writes = _since(ev, R).filter((pl.col("kind") == "as_write") & (pl.col("rid") == B))
    assert writes["blocks"].to_list() == [348, 359]  # nothing for [91904, 91968)
    assert writes["block_size"].to_list() == [256, 256]
    oom = ev.filter(pl.col("kind") == "oom").row(0, named=True)
    assert oom["time"].strftime("%H:%M:%S") == "15:16:29"
    assert (oom["oom_tokens"], oom["oom_available"]) == (2056, 0)
    assert (oom["oom_available_size"], oom["oom_evictable_size"]) == (0, 0)
    text = (INCIDENT / "pp0.log").read_text()
    assert (
        "[2026-11-02 15:16:29 PP0] Prefill out of memory. Try to lower your batch size.\n"
        "Try to allocate 2056 tokens.\n"
        "Available full tokens: 0 (full_available_size=0 + full_evictable_size_=0)\n"
    ) in text
    assert "\nRuntimeError: Prefill out of memory. Try to lower your batch size.\n" in text


def test_startup_lines_give_the_configuration(pp0):
    ev, _ = pp0
    args = ev.filter(pl.col("kind") == "server_args").row(0, named=True)
    assert (args["page_size"], args["chunked_prefill_size"], args["max_prefill_tokens"]) == (
        64,
        16384,
        16384,
    )
    assert (args["disaggregation_mode"], args["pp_size"]) == ("prefill", 4)
    mem = ev.filter(pl.col("kind") == "memory_config").row(0, named=True)
    assert mem["max_total_num_tokens"] == 262144
    assert ev.filter(pl.col("kind") == "checkpoint_align")["align_size"].to_list() == [256]


def test_pp3_batch_lines_of_the_incident():
    ev, summary = read_events([INCIDENT / "pp3.log"])
    assert summary.unmatched == 3
    batches = _since(ev, R).filter(pl.col("kind") == "prefill_batch")
    assert batches.select("new_seq", "new_token", "cached_token").rows() == [
        (3, 16377, 102144),
        (1, 2816, 0),
        (1, 64, 0),
    ]
    assert batches["token_usage"].to_list() == [0.99, 1.0, 1.0]
    assert batches["inflight_req"][0] == 17


def test_pp1_replays_what_pp0_admitted_round_by_round(pp0):
    ev0, _ = pp0
    ev1, summary = read_events([INCIDENT / "pp1.log.gz"])
    assert summary.files[0].gzip and summary.unmatched == 3
    plans = ev1.filter(pl.col("kind") == "replay_plan")
    tail = _since(plans, R)
    assert tail["rids"].to_list() == [[A, B, C], [B], [B]]
    assert tail["extend_tokens"].to_list() == [16377, 2816, 64]
    # Over the whole log: a batch lists any resumed chunk first, then the requests PP0
    # admitted that round, in order. So the first appearances across PP1's plans are
    # exactly PP0's admissions, in order.
    seen: set[str] = set()
    first = []
    for rids in plans["rids"].to_list():
        for rid in rids:
            if rid not in seen:
                seen.add(rid)
                first.append(rid)
    admitted = ev0.filter((pl.col("kind") == "adder_result") & (pl.col("decision") != "rejected"))[
        "rid"
    ].to_list()
    assert first == admitted


def test_round_by_round_on_a_trace_slice():
    """Per round: PP1's rids = resumed chunk (printed by no PP0 line) + PP0's admissions."""
    mod = _script()
    sc = mod.load(mod.TRAFFIC, trace_limit=200)
    cap = capture_run(sc.build_node("prefix"))
    clock = Clock.at("2026-11-02 09:05:00")
    assert cap.oom is None and cap.rounds
    for rc in cap.rounds:
        one = Capture(cap.cfg, [rc])
        admitted = [
            line.split("rid=")[1].split(",")[0]
            for line in pp0_lines(one, clock)
            if "add_one_req result:" in line and "decision=rejected" not in line
        ]
        plan = list(pp1_lines(one, clock))
        if not rc.pieces:
            assert plan == [] and admitted == []
            continue
        rids = plan[0].split("rids=[")[1].split("]")[0].split(", ")
        resumed = [s.rid for s in rc.steps if s.call == "add_chunked_req"]
        assert rids == resumed + admitted


def test_contradiction_and_clean_fixtures():
    ev, summary = read_events([LOGS / "contradiction" / "pp0.log"])
    assert summary.unmatched == 3
    assert ev.filter(pl.col("kind") == "oom")["oom_tokens"].to_list() == [2000]
    ev, summary = read_events([LOGS / "clean" / "pp0.log"])
    assert summary.unmatched == 3 and "oom" not in summary.matched
    assert summary.matched["adder_check"] > 100


def test_incident_scenario_still_gives_the_logged_run():
    cap = capture_run(
        load_scenario(ROOT / "fixtures/scenarios/incident-2026-11-02.toml").build_node("prefix")
    )
    assert [rc.pieces for rc in cap.rounds][1:] == [[(B, 89088, 91904)], [(B, 91904, 91968)]]
    assert cap.oom.tokens == 2056


def test_regeneration_is_byte_identical(tmp_path):
    mod = _script()
    mod.main(["--out", str(tmp_path)])
    names = [
        "incident/pp0.log",
        "incident/pp1.log.gz",
        "incident/pp3.log",
        "clean/pp0.log",
        "contradiction/pp0.log",
    ]
    for name in names:
        assert (tmp_path / name).read_bytes() == (LOGS / name).read_bytes(), name
