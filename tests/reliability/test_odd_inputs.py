"""Inputs of odd kinds and values: a symlink loop is a one-line input error (exit 2), and a
value from the log reaches the terminal as text (never markup, never through rich's
highlighter), however long it is or whatever brackets it holds."""

from __future__ import annotations

import time

import pytest

from tests.conftest import FIXTURES
from tests.reliability._logs import write_log
from tests.reliability._run import run_cli

SCENARIO = FIXTURES / "scenarios" / "postmortem-abc.toml"
CRASHED = "as-1keim4u1e8"


@pytest.fixture
def loop(tmp_path):
    """``loop1 -> loop2 -> loop1``."""
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    return tmp_path / "loop1"


def _one_line(out, code: int = 2) -> str:
    assert out.code == code, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("error: ") and "internal error" not in line
    return line


@pytest.mark.parametrize(
    "args",
    [
        ("parse", "{loop}", "-o", "{tmp}/e.parquet"),
        ("rounds", "{loop}"),
        ("replay", "{loop}"),
        ("report", "{loop}", "-o", "{tmp}/rep"),
        ("simulate", "{loop}", "--ledger", "{tmp}/l.parquet"),
        ("diff", "{loop}", "--policy", "prefix,fixed"),
    ],
)
def test_a_symlink_loop_as_input_is_one_line(loop, tmp_path, args):
    out = run_cli(*(a.format(loop=loop, tmp=tmp_path) for a in args))
    line = _one_line(out)
    assert str(loop) in line and ("symlink loop" in line or "no such" in line), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop1", "loop2"]


def test_a_symlink_loop_as_output_is_one_line(loop, tmp_path):
    out = run_cli("simulate", SCENARIO, "--ledger", loop.parent / "loop1")
    assert _one_line(out) == f"error: {loop}: a symlink loop; give the file itself"
    named = tmp_path / "e.parquet"  # a name of the kind parse writes
    named.symlink_to(loop)
    out = run_cli("parse", FIXTURES / "logs" / "samples" / "incident-pp1.log", "-o", named)
    assert _one_line(out) == f"error: {named}: a symlink loop; give the file itself"


def test_a_rid_with_markup_is_printed_as_it_is(tmp_path):
    """A closing tag in a rid used to end the run in rich's MarkupError (exit 70)."""
    rid = "as-[/x]oops[bold]"
    log = write_log(tmp_path, {CRASHED: rid})
    out = run_cli("replay", log)
    assert out.code == 0, out.stderr
    assert f"Logged out of memory: round 3, {rid}, Try to allocate 2056 tokens" in out.stdout
    out = run_cli("rounds", log, columns=200)
    assert out.code == 0, out.stderr
    assert f"{rid} [89088, 91904)" in out.stdout
    assert f"out of memory in round 3 ({rid})" in out.stdout


def test_a_long_numeric_rid_prints_in_seconds(tmp_path):
    """A 100,000-character rid of number-like text: rich's highlighter took minutes on it."""
    rid = "a" + "1.5e" * 25_000
    log = write_log(tmp_path, {CRASHED: rid})
    for command in ("replay", "rounds"):
        t0 = time.process_time()
        out = run_cli(command, log)
        assert out.code == 0, out.stderr
        assert time.process_time() - t0 < 10, command
        assert rid not in out.stdout and "more)…" in out.stdout  # its head and tail only


def test_paths_with_brackets_are_names_not_patterns_or_markup(tmp_path):
    """``[`` in a path: polars took it for a glob (exit 70), rich for markup."""
    odd = tmp_path / "["
    odd.mkdir()
    log = odd / "x]pp0.log"  # the path holds "[/x]"
    log.write_text(write_log(tmp_path).read_text())
    out = run_cli("rounds", log, "-o", odd / "y]r.parquet")
    assert out.code == 0, out.stderr
    # (a long temporary path may wrap at the terminal's width: lines joined first)
    assert f"4 rounds written to {odd / 'y]r.parquet'}" in out.stdout.replace("\n", "")
    for suffix in (".parquet", ".csv", ".json", ".ndjson"):
        ledger = odd / f"l]{suffix}"
        assert run_cli("simulate", SCENARIO, "--ledger", ledger).code == 0
        out = run_cli("diff", ledger, "--policy", "prefix,fixed")
        assert out.code == 0, (suffix, out.stderr)
