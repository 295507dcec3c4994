"""`replay` and `rounds` on every excerpt of the corpus: exit 0 with the stock analysis
(2 only where nothing is a scheduler's line), the numbers and verdict the sidecar says."""

from __future__ import annotations

import json
import sys

import pytest

from kvforensics.cli import main
from kvforensics.replay.stock import NOT_REBUILT
from tests.logs.conftest import run_cli
from tests.stock.corpus import OOM_ABOVE_POOL, STOCK, params

OOM_KEYS = ("phase", "pool", "tokens", "available", "free", "evictable", "mechanism")


def _run(capsys, monkeypatch, *args) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["kvforensics", *map(str, args)])
    with pytest.raises(SystemExit) as ex:
        main()
        sys.exit(0)
    out = capsys.readouterr()
    return ex.value.code or 0, out.out, out.err


def _args(e):
    return [a for f in e.formats for a in ("--formats", f)]


@pytest.mark.parametrize("e", params())
def test_replay_json_is_the_stock_analysis(e, capsys, monkeypatch):
    code, out, err = _run(capsys, monkeypatch, "replay", e.log, "--format", "json", *_args(e))
    assert code == 0, err
    d = json.loads(out)
    assert d["mode"] == "stock"
    want = e.expect.get("oom", [])
    assert [{k: o[k] for k in OOM_KEYS} for o in d["observed_ooms"]] == [
        {k: w.get(k, "full" if k == "pool" else None) for k in OOM_KEYS} for w in want
    ]
    assert all({"time", "rank", "where"} <= set(o) for o in d["observed_ooms"])
    assert d["observed_oom"] == (d["observed_ooms"][-1] if want else None)
    assert d["retractions"]["count"] == e.expect["retractions"]
    assert len(d["crashes"]) == e.expect["crashes"]
    assert [c["kind"] for c in d["crashes"]] == e.expect.get("crash_kinds", [])
    devices = e.expect.get("crash_devices", [None] * len(d["crashes"]))
    assert [c["device"] for c in d["crashes"]] == devices
    if "crash_time" in e.expect:
        (crash,) = d["crashes"]
        assert crash["time"] == e.expect["crash_time"]
    # the wrapper in front of SGLang's lines, learned from the file
    assert [f["wrapper"] for f in d["log"]["files"]] == [e.expect.get("wrapper")]
    if "chunk" in e.expect:
        assert d["chunk_size"]["value"] == e.expect["chunk"]
    if "node" in e.expect:
        assert d["node"]["kind"] == e.expect["node"]
    if "pool" in e.expect:
        assert d["pool_size"]["value"] == e.expect["pool"]
        assert d["pool_size"]["provenance"] == "observed"
    if "pool_bounds" in e.expect:
        assert d["pool_size"]["interval"] == e.expect["pool_bounds"]
    assert d["not_rebuilt"] == NOT_REBUILT
    assert any("PrefillAdder.add_one_req" in n for n in d["needed_lines"])
    # the release the lines tell (sidecar: worked out from the forms in
    # docs/sglang-releases.md); none of these names a single profile, so the default runs
    assert d["profile"]["release"] == e.expect.get("release")
    assert (d["profile"]["name"], d["profile"]["how"]) == ("fork", "default")


@pytest.mark.parametrize("e", params())
def test_replay_text_says_what_is_missing_once(e, capsys, monkeypatch):
    code, out, err = _run(capsys, monkeypatch, "replay", e.log, *_args(e))
    # the log's own tracebacks may be quoted as unmatched lines; none of the tool's
    assert code == 0 and "Traceback" not in err and "kvforensics/" not in out + err
    words = " ".join(out.split())
    assert words.count("cannot be rebuilt request by request") == 1
    if e.expect.get("wrapper"):
        assert f"{e.expect['wrapper']}; read behind it" in words
    for w in e.expect.get("oom", []):
        assert w["mechanism"] in words and f"{w['tokens']} requested" in words


@pytest.mark.parametrize("e", [p for p in params() if "batch_rounds" in p.values[0].expect])
def test_rounds_are_batch_level(e, capsys, monkeypatch):
    code, out, err = _run(capsys, monkeypatch, "rounds", e.log, "--format", "json", *_args(e))
    assert code == 0, err
    d = json.loads(out)
    assert d["level"] == "batch" and len(d["rounds"]) == e.expect["batch_rounds"]
    assert all(r["level"] == "batch" and r["provenance"] == "observed" for r in d["rounds"])


def test_a_file_that_is_no_scheduler_log_is_exit_2_and_says_what_it_holds(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list\nmilk\n")
    for cmd in ("replay", "rounds"):
        out = run_cli(cmd, notes)
        assert out.returncode == 2 and "--formats" in out.stderr
        assert "2 line(s)" in out.stderr and "'shopping list'" in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_a_wrapped_log_is_read_behind_its_wrapper_without_formats(capsys, monkeypatch):
    """Python logging's prefix in front of SGLang's is learned from the file: the same
    crash as with the excerpt's --formats file, and the wrapper said."""
    wrapped = STOCK / "2025-olmocr105-python-logging.log"
    code, out, err = _run(capsys, monkeypatch, "replay", wrapped, "--format", "json")
    d = json.loads(out)
    assert code == 0, err
    assert [(c["rank"], c["time"]) for c in d["crashes"]] == [("TP0", "2025-03-08 02:04:48")]
    (f,) = d["log"]["files"]
    assert f["wrapper"] == "lines wrapped by Python logging's `date,ms - logger - LEVEL - ` prefix"
    assert d["log"]["unmatched"] == 0


def test_a_decode_node_log_is_analysed_not_refused():
    out = run_cli("replay", STOCK / "2025-14972-decode-batches.log")
    assert out.returncode == 0
    assert "a decode node" in " ".join(out.stdout.split())


def test_an_out_of_memory_above_the_pool_is_a_contradiction(tmp_path):
    log = tmp_path / "p.log"
    log.write_text(OOM_ABOVE_POOL)
    out = run_cli("replay", log, "--format", "json")
    d = json.loads(out.stdout)
    assert out.returncode == 3 and d["pool_size"]["value"] == 4000
    assert "5000 free + evictable" in d["contradictions"][0]["detail"]


def test_without_a_pool_size_the_message_bounds_it_from_below(capsys, monkeypatch):
    code, out, _ = _run(
        capsys, monkeypatch, "replay", STOCK / "2026-30743-glm-exhaustion.log", "--format", "json"
    )
    d = json.loads(out)
    assert code == 0 and d["pool_size"]["value"] is None
    assert d["pool_size"]["interval"][0] == 704
