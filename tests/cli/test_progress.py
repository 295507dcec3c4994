"""Progress on stderr: one line per stage while a terminal watches, nothing otherwise, and
the outputs the same either way."""

import io
import json
import os
import subprocess
import sys

import pytest
from rich.console import Console

from kvforensics import progress
from kvforensics.progress import EVERY, Stages
from kvforensics.replay import ReplayOptions, replay_logs
from kvforensics.report.inputs import replay_inputs
from tests.cli.test_options import INC, SCENARIO
from tests.conftest import FIXTURES, ROOT

LOGS = [INC / "pp0.log", INC / "pp3.log"]
SAMPLE = FIXTURES / "logs" / "samples" / "incident-pp0.log"
POLICIES = ["fixed", "park"]


def _terminal() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=True, width=100), buf


def _streamed(display: Stages) -> dict:
    with display:
        rr = replay_logs(LOGS, ReplayOptions(POLICIES, stream=True, whole_log=True))
    return rr.as_dict()


def test_a_streamed_replay_shows_each_stage_and_gives_the_same_result():
    console, buf = _terminal()
    shown = _streamed(Stages(console))
    drawn = buf.getvalue()
    for stage in ("reading logs", "rebuilding rounds", "checking rounds"):
        assert stage in drawn, stage
    for policy in ("prefix", *POLICIES):
        assert f"policy {policy}" in drawn, policy
    # the stages stand in the order the pipeline reaches them
    at = [drawn.index(s) for s in ("reading logs", "rebuilding rounds", "policy prefix")]
    assert at == sorted(at)
    # the rounds the display counted are the rounds the replay checked
    assert f"{shown['fidelity']['rounds_checked']:,}" in drawn or "7,751 rounds" in drawn
    assert shown == _streamed(Stages(Console(file=io.StringIO(), force_terminal=True)))


def test_byte_range_workers_show_the_bytes_they_read(monkeypatch: pytest.MonkeyPatch):
    """``--jobs N`` over byte ranges: while the workers run, the display counts the bytes
    they read, all of them by the end, then the join's rounds."""
    from kvforensics.replay import ranges

    monkeypatch.setattr(ranges, "MIN_PART", 2 << 10)
    monkeypatch.setattr(ranges, "MARGIN", 24 << 10)
    log = FIXTURES / "logs" / "clean" / "pp0.log"
    console, buf = _terminal()
    with Stages(console):
        rr = replay_logs([log], ReplayOptions(POLICIES, stream=True, jobs=2))
    drawn = buf.getvalue()
    assert "reading and re-running (2 workers)" in drawn
    total = sum(w.end - w.start for p in ranges.parts(
        log, ranges.plan(log, 2), ranges.RangeOptions({}, None, None, rr.profile, False),
        24 << 10, ranges.LOOKAHEAD) for w in (p.pre, p.own, p.post) if w is not None)  # fmt: skip
    assert total > 100 << 10
    # all of them read by the end (in kB for a log this small)
    assert f"{total / 1e3:,.1f} of {total / 1e3:,.1f} kB" in drawn
    assert drawn.index("reading and re-running") < drawn.index("rebuilding rounds")


def test_a_disabled_display_writes_nothing_even_to_a_terminal():
    console, buf = _terminal()
    _streamed(Stages(console, enabled=False))
    assert buf.getvalue() == ""
    assert progress.current() is progress.NONE  # and the command's display is closed


def test_the_whole_pass_counts_rounds_checked_against_their_total():
    console, buf = _terminal()
    with Stages(console):
        rr, _ = replay_inputs(LOGS, ["prefix", "fixed"])
    n = len(rr.rebuild.rounds)
    assert f"{n:,} of {n:,} rounds" in buf.getvalue()


def test_a_stage_hands_its_count_to_the_display_every_so_many_items():
    """Cheap in a loop of a million rounds: the display sees every EVERY-th count."""
    console, _ = _terminal()
    with Stages(console) as st:
        stage = st.stage("x", unit="rounds")
        task = st._bar.tasks[-1]
        for _ in range(EVERY - 1):
            stage.advance()
        assert task.completed == 0
        stage.advance()
        assert task.completed == EVERY
        stage.advance(5)
        assert task.completed == EVERY
        stage.done()
        assert task.completed == task.total == EVERY + 5


def test_a_stage_name_is_shown_as_written_not_read_as_markup():
    console, buf = _terminal()
    with Stages(console) as st:
        st.stage("exec incident [prefix]", 7, "steps").done()
    assert "exec incident [prefix]" in buf.getvalue()


def test_a_scope_takes_its_stages_off_the_display():
    console, _ = _terminal()
    with Stages(console) as st:
        st.stage("nodes", 2, "nodes")
        with st.scope():
            st.stage("reading logs", 10, "bytes")
            assert len(st._bar.tasks) == 2
        assert [t.description for t in st._bar.tasks] == ["nodes"]


def _cli(*args, tty: bool):
    env = {**os.environ, "COLUMNS": "100", "TTY_COMPATIBLE": "1" if tty else "0"}
    return subprocess.run(
        [sys.executable, "-m", "kvforensics", *map(str, args)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=600,
    )  # fmt: skip


def _commands(tmp):
    return {
        "replay": (["replay", SAMPLE, "--format", "json"], ["reading logs", "policy fixed"]),
        "replay table": (["replay", SAMPLE], ["checking rounds", "policy park"]),
        "rounds": (["rounds", SAMPLE, "--format", "json"], ["reading logs", "rebuilding rounds"]),
        "rounds -o": (["rounds", SAMPLE, "-o", tmp / "r.ndjson"], ["rebuilding rounds"]),
        "parse": (["parse", SAMPLE, "-o", tmp / "e.parquet"], ["reading logs"]),
        "report": (["report", SAMPLE, "-o", tmp / "rep"], ["checking rounds", "writing report"]),
        "diff": (["diff", SAMPLE, "--format", "json"], ["checking rounds", "policy fixed"]),
        "explain": (["explain", SCENARIO, "--round", "0", "--format", "json"], ["policy prefix"]),
        "simulate": (["simulate", SCENARIO, "--format", "json"], ["policy fixed"]),
        "scan": (["scan", SAMPLE, "--format", "json", "--jobs", "1"], ["scanning nodes"]),
        # its output holds its own run time: compared for the display only
        "exec": (["exec", SCENARIO, "--device", "cpu"], ["exec incident-2026-11-02 [prefix]"]),
    }


#: exec's run on tensors twice over (drawn and not) is a long run: in the slow step
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n == "exec" else n for n in _commands(ROOT)]
)
def test_each_command_draws_its_stages_on_a_terminal_and_nothing_else(name, tmp_path):
    argv, stages = _commands(tmp_path)[name]
    runs = []
    for extra, tty in (([], True), (["--no-progress"], True), ([], False)):
        runs.append(_cli(*argv, *extra, tty=tty))
        assert runs[-1].returncode not in (1, 2, 70), runs[-1].stderr[-2000:]
        for out in list(tmp_path.iterdir()):  # room for the next run's files
            out.rename(tmp_path / f"{out.name}.{len(runs)}")
    drawn, quiet, piped = runs
    for stage in stages:
        assert stage in drawn.stderr, (stage, drawn.stderr[-2000:])
    # off: what stderr says besides the display (report's exit line), and no more
    assert quiet.stderr == piped.stderr and drawn.stderr.endswith(quiet.stderr)
    assert "\x1b" not in quiet.stderr and not any(s in quiet.stderr for s in stages)
    if name != "exec":  # the same output with the display on or off
        assert quiet.stdout == drawn.stdout
    assert quiet.returncode == piped.returncode == drawn.returncode
    if "--format" in argv:  # and JSON the same on a terminal or not
        assert json.loads(piped.stdout) == json.loads(drawn.stdout)
