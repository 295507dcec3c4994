"""`report` on logs as a postmortem section, and a report directory that is safe to reuse."""

import json
import re
import struct

import pytest

from tests.cli.test_options import INC, SCENARIO, cli

LOGS = (INC / "pp0.log", INC / "pp3.log")


@pytest.fixture(scope="module")
def incident(tmp_path_factory):
    out = tmp_path_factory.mktemp("rep") / "incident"
    r = cli("report", *LOGS, "-o", out)
    assert r.returncode == 0, r.stderr
    replay = json.loads(cli("replay", *LOGS, "--format", "json").stdout)
    return out, (out / "report.md").read_text(), replay


def _section(md: str, heading: str) -> str:
    start = md.index(heading)
    nxt = md.find("\n## ", start + len(heading))
    return md[start : nxt if nxt > 0 else None]


def test_title_names_the_crash_not_a_file_dump(incident):
    _, md, replay = incident
    first = md.splitlines()[0]
    o = replay["observed_oom"]
    assert first.startswith("# Prefill KV out of memory on PP0")
    assert o["rid"] in first and "15:16:29" in first and "replay under" not in first


def test_story_comes_in_the_order_of_events(incident):
    _, md, _ = incident
    heads = [
        "## Summary",
        "## What happened",
        "### 1. The admission check",
        "### 2. The truncation and the alignment gap",
        "### 3. Who came through the gap",
        "### 4. The pieces that followed",
        "### 5. The out of memory",
        "## What the fix changes, and what it costs",
        "## What the fix does not cover",
        "## Figures",
        "## Evidence",
    ]
    at = [md.index(h) for h in heads]
    assert at == sorted(at)


def test_no_raw_python_values(incident):
    _, md, _ = incident
    for raw in ("True", "False", "None", "[]", "{}", "{'", "['"):
        assert raw not in md, raw


def test_counts_agree_with_replay(incident):
    _, md, replay = incident
    table = _section(md, "## What the fix changes")
    for name, p in replay["policies"].items():
        row = next(x for x in table.splitlines() if x.startswith(f"| `{name}` |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2] == str(p["rounds"]), (name, row)


@pytest.mark.parametrize("number", ["4936", "192", "15360", "34624", "18303", "2056", "2304"])
def test_every_headline_number_says_where_it_came_from(incident, number):
    """Each sentence of the story that states the number cites a log line or says how
    the number was obtained."""
    _, md, _ = incident
    story = _section(md, "## What happened")
    sentences = [s for s in re.split(r"(?<=[.:])\s+(?=[A-Z(])", story) if number in s]
    assert sentences, number
    for s in sentences:
        assert re.search(r"\w+\.log:\d+|derived|inferred|replay under", s), s


def test_the_cost_and_its_estimate(incident):
    _, md, replay = incident
    cost = _section(md, "## What the fix changes")
    delays = [d for d in replay["policies"]["fixed"]["delays"] if d["delay_s"]]
    for d in delays:
        assert f"{d['delay_s']:+.2f} s" in cost and d["rid"] in cost
    assert "override with --transfer-seconds" in cost  # how the transfer time was chosen
    assert "median of the traffic before" in cost  # an alternative estimate, re-run
    assert "ruled out by the log" in cost


def test_the_books_are_told_for_two_policies_not_all(incident):
    _, md, _ = incident
    assert "##### under `prefix`" in md and "##### under `fixed`" in md
    assert "##### under `drain`" not in md and "##### under `upstream`" not in md


def _png_size(path):
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_figures_fit_a_page(incident):
    out, _, _ = incident
    for name in ("pool.png", "waterfall-round-7747.png"):
        w, h = _png_size(out / name)
        assert 1400 <= w <= 1800 and h <= 1.2 * w, (name, w, h)


def test_report_with_the_replay_flags(tmp_path):
    out = tmp_path / "r"
    r = cli("report", *LOGS, "-o", out, "--transfer-seconds", 9, "--policy", "prefix,fixed")
    assert r.returncode == 0, r.stderr
    md = (out / "report.md").read_text()
    assert "KV transfers take 9.00 s (given: --transfer-seconds)" in md
    assert "+9.00 s" in md


def test_a_non_empty_directory_is_refused_without_force(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    r = cli("report", SCENARIO, "-o", tmp_path)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert "--force" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_force_replaces_only_an_earlier_reports_files(tmp_path):
    out = tmp_path / "r"
    assert cli("report", SCENARIO, "-o", out, "--round", "1").returncode == 0
    (out / "notes.txt").write_text("mine")
    earlier = set(json.loads((out / "kvforensics-report.json").read_text())["files"])
    assert "waterfall-round-1.png" in earlier and "notes.txt" not in earlier
    r = cli("report", SCENARIO, "-o", out, "--force")
    assert r.returncode == 0, r.stderr
    names = {p.name for p in out.iterdir()}
    assert "waterfall-round-1.png" not in names  # the earlier report's, not rewritten
    assert "waterfall-round-0.png" in names and (out / "notes.txt").read_text() == "mine"
    now = set(json.loads((out / "kvforensics-report.json").read_text())["files"])
    assert now == names - {"notes.txt"}


def test_force_never_overwrites_a_file_no_report_wrote(tmp_path):
    (tmp_path / "pool.png").write_text("a user's own figure")
    r = cli("report", SCENARIO, "-o", tmp_path, "--force")
    assert r.returncode == 2 and "pool.png" in r.stderr
    assert (tmp_path / "pool.png").read_text() == "a user's own figure"


def test_a_manifest_cannot_point_outside_its_directory(tmp_path):
    out = tmp_path / "r"
    assert cli("report", SCENARIO, "-o", out).returncode == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    m = out / "kvforensics-report.json"
    body = json.loads(m.read_text())
    body["files"] += ["../victim.txt", str(victim)]
    m.write_text(json.dumps(body))
    assert cli("report", SCENARIO, "-o", out, "--force").returncode == 0
    assert victim.read_text() == "keep"


def test_report_without_an_out_of_memory(tmp_path):
    from tests.conftest import FIXTURES

    out = tmp_path / "clean"
    r = cli("report", FIXTURES / "logs" / "clean" / "pp0.log", "-o", out)
    assert r.returncode == 0, r.stderr
    md = (out / "report.md").read_text()
    assert md.startswith("# Replay of PP0 (pp0.log): no out of memory")
    assert "True" not in md and "None" not in md


# 0 s transfers would leave memory the log says was not there; the forward runs are held
# to the observations, so the crash is reproduced all the same and the assumption is said
# to be contradicted by the evidence
@pytest.mark.parametrize("seconds", ["0", pytest.param("4", marks=pytest.mark.slow)])
def test_report_exits_as_replay_does(tmp_path, seconds):
    flags = ("--transfer-seconds", seconds, "--policy", "prefix,fixed")
    replay = cli("replay", *LOGS, *flags)
    r = cli("report", *LOGS, "-o", tmp_path / "r", *flags)
    assert r.returncode == replay.returncode == 0, r.stderr
    md = (tmp_path / "r" / "report.md").read_text()
    assert "not reproduced" not in md
    assert ("contradicted by the evidence" in replay.stdout) == (seconds == "0")


def test_report_help_says_how_it_exits():
    out = " ".join(cli("report", "--help", columns=200).stdout.split())
    assert "4 the logged out-of-memory is not reproduced" in out
