"""diff, explain and report on the incident scenario."""


import polars as pl
import pytest

from kvforensics.errors import InputError
from kvforensics.ledger_io import read_frame, write_frame
from kvforensics.report import diff_ledgers, explain_rid, explain_round, write_report
from kvforensics.scenario import load_scenario
from tests.conftest import FIXTURES, ROOT
from tests.incli import run

INCIDENT = FIXTURES / "scenarios" / "incident-2026-11-02.toml"
B, C = "as-1keim4u1e8", "as-xpkq7d03n5"


@pytest.fixture(scope="module")
def results():
    sc = load_scenario(INCIDENT)
    return {p: sc.build_node(p).run() for p in ("prefix", "fixed", "upstream", "drain")}


def test_first_divergence_is_c_in_round_0(results):
    left, right = results["prefix"].ledger_frame(), results["fixed"].ledger_frame()
    # the step number the diff must report, read from the ledger itself
    c_step = left.filter(
        (pl.col("round") == 0) & (pl.col("rid") == C) & (pl.col("call") == "add_one_req")
    )
    assert c_step["step"].to_list() == [3]
    d = diff_ledgers(left, right, "prefix", "fixed")
    fd = d.first_divergence
    assert (fd.round, fd.step) == (0, 3)
    assert (fd.left.rid, fd.left.decision, fd.right.decision) == (C, "full", "rejected")
    assert {"decision", "load_back", "rem_total_tokens"} <= set(fd.fields)
    # the cause shows one step earlier in the books: B's reserved tail
    fa = d.first_accounting_divergence
    assert (fa.round, fa.step, fa.left.rid) == (0, 2, B)
    assert "reserved_tail" in fa.fields and fa.right.reserved_tail == 4993
    out = d.as_dict()
    assert out["first_divergence"]["step"] == 3 and not out["identical"]
    r0 = out["rounds"][0]
    assert r0["differs"] and r0["left"]["unallocated_tail"] == 4936
    last = out["rounds"][-1]["left"]
    assert last["oom"] == {"round": 3, "rid": B, "tokens": 2056, "available": 0}
    md = d.to_markdown()
    assert "round 0, step 3" in md and "OUT OF MEMORY allocating 2056" in md


def test_identical_ledgers_do_not_diverge(results):
    df = results["prefix"].ledger_frame()
    d = diff_ledgers(df, df.clone(), "a", "b")
    assert d.identical and d.first_divergence is None
    assert not any(r.differs for r in d.rounds)
    assert "no divergence" in d.to_markdown()


@pytest.mark.parametrize("ext", [".parquet", ".csv"])
def test_ledger_files_round_trip_into_diff(results, tmp_path, ext):
    both = pl.concat([results["prefix"].ledger_frame(), results["fixed"].ledger_frame()])
    path = tmp_path / f"ledger{ext}"
    write_frame(both, path)
    back = read_frame(path)
    split = {p: back.filter(pl.col("policy") == p) for p in ("prefix", "fixed")}
    direct = diff_ledgers(
        results["prefix"].ledger_frame(), results["fixed"].ledger_frame(), "prefix", "fixed"
    )
    again = diff_ledgers(split["prefix"], split["fixed"], "prefix", "fixed")
    assert again.as_dict() == direct.as_dict()
    same = diff_ledgers(split["prefix"], results["prefix"].ledger_frame(), "file", "run")
    assert same.identical


def test_explain_round_0_has_the_postmortem_numbers(results):
    e = explain_round({p: results[p] for p in ("prefix", "fixed")}, 0)
    md = e.to_markdown()
    for n in (121408, 108416, 34624, 94463, 18303, 18304, 13310, 4993, 192, 15610, 15360, 4936):
        assert str(n) in md, n
    pre = {s.values.rid: s for s in e.steps["prefix"] if s.values.call == "add_one_req"}
    fix = {s.values.rid: s for s in e.steps["fixed"] if s.values.call == "add_one_req"}
    assert pre[C].values.need == 15610 and pre[C].values.rem_total_tokens == 18303
    assert pre[C].values.chunk == "192 → 0"
    assert "not in rem_total_token_offset" in pre[C].sentence and "15360" in pre[C].sentence
    assert fix[B].values.reserved_tail == 4993
    assert (
        fix[C].values.rem_total_tokens == 13310 and fix[C].values.budget_state == "NO_TOKEN"
    )
    assert fix[C].values.chunk == "192"
    assert e.as_dict()["policies"]["fixed"]["page_size"] == 64


def test_explain_from_ledger_frames_and_by_rid(results):
    frames = {p: results[p].ledger_frame() for p in ("prefix", "fixed")}
    assert explain_round(frames, 0).as_dict()["policies"]["prefix"]["page_size"] == 64
    rounds = [e.round for e in explain_rid(results, C)]
    assert rounds == [0, 1, 2, 3]  # refused in 1 and 2 under fixed, admitted in 3
    with pytest.raises(InputError):
        explain_round(results, 99)
    with pytest.raises(InputError):
        explain_rid(results, "no-such-request")


def test_write_report(results, tmp_path):
    out = tmp_path / "attachment"
    paths = write_report(out, results, title="incident 2026-11-02")
    names = {p.name for p in paths}
    assert {
        "report.md",
        "pool.png",
        "waterfall-round-0.png",
        "ledger.parquet",
        "ledger.csv",
    } <= names
    for p in paths:
        assert p.stat().st_size > 0
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "report.md").read_text()
    assert "2056" in md and "out of memory in round 3" in md
    assert "## Where each number came from" in md and "scenario file" in md
    ledger = read_frame(out / "ledger.parquet")
    assert set(ledger["policy"].unique()) == {"prefix", "fixed", "upstream", "drain"}
    assert not list(out.glob(".*.tmp"))


def test_report_takes_story_evidence_and_events(results, tmp_path):
    events = pl.DataFrame({"line": [1, 2], "kind": ["add_one_req", "oom"]})
    write_report(
        tmp_path,
        {p: results[p] for p in ("prefix", "fixed")},
        title="t",
        story=["## What happened", "", "the tail was not reserved", ""],
        evidence=["## Evidence", "", "seq_len of as-1keim4u1e8: PP0 log line 1234", ""],
        events=events,
        focus_round=1,
    )
    md = (tmp_path / "report.md").read_text()
    assert "tail was not reserved" in md and "PP0 log line 1234" in md
    assert "### Round 1's books under `prefix` and `fixed`" in md
    assert md.index("What happened") < md.index("## Figures") < md.index("## Evidence")
    assert read_frame(tmp_path / "events.csv").height == 2
    with pytest.raises(InputError):
        write_report(tmp_path, results, title="t", focus_round=42, force=True)


def test_report_refuses_to_write_over_its_input(results, tmp_path):
    victim = tmp_path / "ledger.csv"
    victim.write_text("keep me")
    with pytest.raises(InputError):
        write_report(tmp_path, results, title="t", inputs=[victim])
    assert victim.read_text() == "keep me"


def cli(*args):
    return run(*args, cwd=ROOT)


def test_cli_diff_explain_report(tmp_path):
    r = cli("diff", INCIDENT, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert '"step": 3' in r.stdout
    ledger = tmp_path / "l.parquet"
    assert cli("simulate", INCIDENT, "--ledger", ledger).returncode == 0
    r = cli("diff", ledger, "--policy", "prefix,fixed", "--format", "markdown")
    assert r.returncode == 0 and "round 0, step 3" in r.stdout
    r = cli("explain", INCIDENT, "--round", "0", "--format", "markdown")
    assert r.returncode == 0 and "13310" in r.stdout
    r = cli("report", INCIDENT, "-o", tmp_path / "rep", "--policy", "prefix,fixed")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "rep" / "report.md").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("diff", "missing.toml"),
        ("diff", INCIDENT, "--policy", "prefix,bogus"),
        ("diff", "missing.parquet", "other.parquet"),
        ("explain", INCIDENT, "--round", "99"),
        ("explain", INCIDENT, "--rid", "nobody"),
        ("explain", INCIDENT),
        ("explain", "missing.toml", "--round", "0"),
        ("report", INCIDENT, "-o", INCIDENT),
        ("report", INCIDENT, "-o", "unused", "--policy", "bogus"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(args, tmp_path):
    r = cli(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")


def test_cli_several_policies_in_one_file_need_a_choice(tmp_path):
    ledger = tmp_path / "l.csv"
    assert cli("simulate", INCIDENT, "--ledger", ledger).returncode == 0
    r = cli("diff", ledger, ledger)
    assert r.returncode == 2 and "choose with --policy" in r.stderr
