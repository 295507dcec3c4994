"""End to end: the incident logs through `rounds` and `replay`, as a user runs them."""

import json

import pytest

from tests.conftest import FIXTURES
from tests.incli import run

INC = FIXTURES / "logs" / "incident"
ROOT_FORMATS = FIXTURES.parent / "kvforensics" / "logs" / "formats"
B, C = "as-1keim4u1e8", "as-xpkq7d03n5"


def cli(*args):
    return run(*args)


@pytest.fixture(scope="module")
def pp0_only():
    out = cli("replay", INC / "pp0.log", "--format", "json")
    return out.returncode, json.loads(out.stdout)


def test_replay_pp0_reproduces_the_incident(pp0_only):
    rc, d = pp0_only
    assert d["observed_oom"]["rid"] == B
    assert (d["observed_oom"]["tokens"], d["observed_oom"]["available"]) == (2056, 0)
    assert d["reproduced"] is True
    assert d["policies"]["prefix"]["oom"] == d["observed_oom"]
    for p in ("fixed", "upstream", "drain"):
        assert d["policies"][p]["oom"] is None
    rc_ = d["root_cause"]
    assert (rc_["victim_rid"], rc_["unreserved_tail"], rc_["leftover_chunk_budget"]) == (
        B,
        4936,
        192,
    )
    assert (rc_["intruder_rid"], rc_["intruder_compute"], rc_["intruder_load_back"]) == (
        C,
        185,
        15360,
    )
    assert (rc_["unaligned_piece"], rc_["aligned_piece"]) == (2496, 2304)
    delays = {x["rid"]: x for x in d["policies"]["fixed"]["delays"]}
    assert delays[C]["delay_s"] > 0  # the fix's cost: C waits for memory
    # PP0 alone: every logged number agrees and the evidence holds together.
    assert (d["fidelity"]["mismatches"], d["contradictions"]) == ([], [])
    assert rc == 0


def rounds_json(*files, rc=0):
    out = cli("rounds", *files, "--format", "json")
    assert out.returncode == rc, out.stderr
    return json.loads(out.stdout)


def b_pieces(d):
    return [
        (p["start"], p["end"], p["provenance"], p["cross_checked"], p["evidence"])
        for r in d["rounds"]
        for p in r["pieces"]
        if p["rid"] == B
    ]


def test_rounds_from_pp0_alone():
    d = rounds_json(INC / "pp0.log")
    assert d["config"]["page_size"]["provenance"] == "observed"
    assert d["config"]["align_size"]["value"] == 256
    assert d["config"]["as_block_size"]["value"] == 256
    assert {d["config"][k]["provenance"] for k in ("page_size", "align_size", "as_block_size")} == {
        "observed"
    }
    pieces = b_pieces(d)
    assert [(s, e, p) for s, e, p, _, _ in pieces] == [
        (86784, 89088, "observed"),
        (89088, 91904, "inferred"),
        (91904, 91968, "inferred"),
        (91968, 94024, "derived"),
    ]
    assert any("blocks=359" in ev for ev in pieces[1][4])
    assert any("2056" in ev for ev in pieces[3][4])
    assert not any(c for _, _, _, c, _ in pieces)


def test_pp3_cross_checks_the_inferred_pieces():
    d = rounds_json(INC / "pp0.log", INC / "pp1.log.gz", INC / "pp3.log")
    pieces = b_pieces(d)
    assert [c for *_, c, _ in pieces[1:3]] == [True, True]
    assert any("#new-token: 2816" in ev for ev in pieces[1][4])
    assert any("#new-token: 64" in ev for ev in pieces[2][4])


def test_log_without_startup_lines_names_the_flags(tmp_path):
    lines = (INC / "pp0.log").read_text().splitlines()
    body = [
        x
        for x in lines
        if "server_args" not in x
        and "max_total_num_tokens" not in x
        and "checkpoint end align" not in x
    ]
    f = tmp_path / "nostart.log"
    f.write_text("\n".join(body[-40:]) + "\n")
    out = cli("replay", f)
    assert out.returncode == 2
    assert "--page-size" in out.stderr and "--align" in out.stderr and "--chunk-size" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    ok = cli(
        "replay",
        f,
        "--page-size",
        64,
        "--align",
        256,
        "--chunk-size",
        16384,
        "--pool-size",
        262144,
        "--format",
        "json",
    )
    assert json.loads(ok.stdout)["reproduced"] is True


def test_clean_log_has_no_oom_and_agrees():
    out = cli("replay", FIXTURES / "logs" / "clean" / "pp0.log", "--format", "json")
    d = json.loads(out.stdout)
    assert out.returncode == 0
    assert d["observed_oom"] is None and d["root_cause"] is None
    assert d["fidelity"]["rounds_checked"] > 100 and d["fidelity"]["mismatches"] == []
    assert all(p["oom"] is None for p in d["policies"].values())


def test_incident_traffic_matches_the_model_round_by_round(pp0_only):
    _, d = pp0_only
    assert d["fidelity"]["rounds_checked"] > 5000
    assert d["fidelity"]["mismatches"] == []
    assert d["contradictions"] == []


def test_contradicting_log_is_reported_not_crashed():
    out = cli("replay", FIXTURES / "logs" / "contradiction" / "pp0.log", "--format", "json")
    d = json.loads(out.stdout)
    assert out.returncode == 4  # the logged OOM is not what the model reproduces
    assert d["reproduced"] is False
    assert d["observed_oom"]["tokens"] == 2000
    assert d["policies"]["prefix"]["oom"]["tokens"] == 2056
    # the logged amount is no piece the model gives: one contradiction, at the crash
    assert [c["what"] for c in d["contradictions"]] == ["out of memory"]
    table = cli("replay", FIXTURES / "logs" / "contradiction" / "pp0.log")
    assert table.returncode == 4 and "NOT reproduced" in table.stdout


@pytest.mark.slow  # report, explain and diff each replay the incident bundle
def test_report_explain_and_diff_from_logs(tmp_path):
    out = cli("report", INC / "pp0.log", INC / "pp3.log", "-o", tmp_path / "rep")
    assert out.returncode == 0, out.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    for number in ("2056", "4936", "15360", "192", "13310"):
        assert number in md
    assert (tmp_path / "rep" / "events.parquet").stat().st_size > 0
    assert (tmp_path / "rep" / "pool.png").read_bytes()[:4] == b"\x89PNG"
    exp = cli("explain", INC / "pp0.log", "--round", 7747, "--format", "json")
    assert exp.returncode == 0, exp.stderr
    text = exp.stdout
    for number in ("121408", "108416", "34624", "94463", "18303", "18304", "13310"):
        assert number in text
    diff = cli("diff", INC / "pp0.log", "--format", "json")
    assert diff.returncode == 0, diff.stderr
    first = json.loads(diff.stdout)["first_divergence"]
    assert (first["round"], first["step"], first["left"]["rid"]) == (7747, 3, C)
    assert "decision" in first["fields"]


@pytest.mark.slow  # the incident bundle replayed and executed on tensors per policy
def test_exec_from_logs_confirms_the_oom_and_the_fix():
    pre = cli("exec", INC / "pp0.log", "--policy", "prefix", "--format", "json")
    assert pre.returncode == 0, pre.stderr
    d = json.loads(pre.stdout)
    assert d["oom"] == {"round": 7750, "rid": B, "tokens": 2056, "available": 0}
    assert d["agrees_with_model"] is True and d["integrity"] == "ok"
    fix = json.loads(cli("exec", INC / "pp0.log", "--policy", "fixed", "--format", "json").stdout)
    assert fix["oom"] is None and fix["integrity"] == "ok"
    assert B in fix["completed"]


@pytest.mark.parametrize(
    ("path", "says"),
    [
        (FIXTURES / "no-such.log", "no such file"),
        (FIXTURES / "logs", "directory"),
    ],
)
def test_replay_bad_input_is_one_line(path, says):
    out = cli("replay", path)
    assert out.returncode == 2
    assert says in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert "Traceback" not in out.stderr


def test_other_ranks_that_disagree_are_contradictions(tmp_path):
    import gzip

    pp1 = gzip.decompress((INC / "pp1.log.gz").read_bytes()).decode()
    pp1 = pp1.replace(
        "rids=[as-1keim4u1e8], extend_tokens=64", "rids=[as-1keim4u1e8], extend_tokens=128"
    )
    pp3 = (INC / "pp3.log").read_text().replace("#new-token: 2816,", "#new-token: 2880,")
    (tmp_path / "pp1.log").write_text(pp1)
    (tmp_path / "pp3.log").write_text(pp3)
    d = rounds_json(INC / "pp0.log", tmp_path / "pp1.log", tmp_path / "pp3.log", rc=3)
    what = {c["what"]: c["detail"] for c in d["contradictions"]}
    assert "2880" in what["#new-token"] and "2816" in what["#new-token"]
    assert "extend_tokens=128" in what["PP plan"]
    # The piece PP3 contradicts is not marked cross-checked by it.
    r = next(
        r for r in d["rounds"] if any((p["rid"], p["start"]) == (B, 89088) for p in r["pieces"])
    )
    assert not any("#new-token" in e for p in r["pieces"] for e in p["evidence"])


def test_a_fork_with_other_wording_replays_with_its_own_catalogue(tmp_path):
    fork_line = "PrefillAdder.add_one_req: "
    log = tmp_path / "pp0.log"
    log.write_text((INC / "pp0.log").read_text().replace(fork_line, "Adder check: "))
    cat = tmp_path / "fork.toml"
    builtin = (ROOT_FORMATS / "fork.toml").read_text()
    block = builtin[builtin.index('[[format]]\nname = "adder_check"') :]
    block = block[: block.index("[[format]]", 10)]
    cat.write_text(
        block.replace("PrefillAdder\\.add_one_req: ", "Adder check: ").replace(
            fork_line, "Adder check: "
        )
    )
    assert cli("replay", log).returncode == 2
    out = cli("replay", log, "--formats", cat, "--format", "json")
    d = json.loads(out.stdout)
    assert d["reproduced"] is True and d["fidelity"]["mismatches"] == []


def test_cut_log_is_replayed_as_far_as_it_goes(tmp_path):
    cut = tmp_path / "pp0.log"
    cut.write_bytes((INC / "pp0.log").read_bytes()[:7_000_000])  # ends mid-line, before R
    out = cli("replay", cut)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())  # the terminal width wraps lines
    assert "ends in a cut line" in text and "cut short" in text
    d = json.loads(cli("replay", cut, "--format", "json").stdout)
    assert d["log"]["files"][0]["cut_last_line"] is True
    assert d["observed_oom"] is None
    assert d["fidelity"]["rounds_checked"] > 5000 and d["fidelity"]["mismatches"] == []


def test_one_missing_batch_line_is_one_local_finding(tmp_path):
    lines = (INC / "pp3.log").read_text().splitlines(keepends=True)
    batch = [i for i, line in enumerate(lines) if "Prefill batch" in line]
    del lines[batch[len(batch) // 2]]
    (tmp_path / "pp3.log").write_text("".join(lines))
    d = json.loads(cli("replay", INC / "pp0.log", tmp_path / "pp3.log", "--format", "json").stdout)
    assert d["reproduced"] is True
    assert [c["what"] for c in d["contradictions"]] == ["batch line"]
