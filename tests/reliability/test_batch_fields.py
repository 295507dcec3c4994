"""A batch line that lacks a field the cross-check shows is compared on what it has."""

import json

from tests.conftest import FIXTURES
from tests.reliability._run import run_cli

INC = FIXTURES / "logs" / "incident"


def test_batch_lines_without_cached_token(tmp_path):
    pp3 = (INC / "pp3.log").read_text()
    damaged = pp3.replace("#cached-token", "#cache\ufffd-token")
    assert damaged != pp3
    (tmp_path / "pp3.log").write_text(damaged)
    whole = run_cli("replay", INC / "pp0.log", INC / "pp3.log", "--format", "json")
    out = run_cli("replay", INC / "pp0.log", tmp_path / "pp3.log", "--format", "json")
    # the same replay: #new-token still pairs the rounds; the cached count is not shown
    assert out.code == whole.code, out.stderr
    got, want = json.loads(out.stdout), json.loads(whole.stdout)
    assert got["fidelity"]["rounds_checked"] == want["fidelity"]["rounds_checked"] > 0
    assert {k: got[k] for k in want if k != "log"} == {k: want[k] for k in want if k != "log"}


def test_batch_lines_without_new_token(tmp_path):
    pp3 = (INC / "pp3.log").read_text()
    damaged = pp3.replace("#new-token", "#new-tok\ufffdn", 3)
    (tmp_path / "pp3.log").write_text(damaged)
    out = run_cli("replay", INC / "pp0.log", tmp_path / "pp3.log", "--format", "json")
    whole = run_cli("replay", INC / "pp0.log", INC / "pp3.log", "--format", "json")
    # a line that gives no token count checks nothing: no contradiction, the same replay
    assert out.code == whole.code == 0, out.stderr
    got, want = json.loads(out.stdout), json.loads(whole.stdout)
    assert got["contradictions"] == [] and got["fidelity"] == want["fidelity"]
    assert got["fidelity"]["rounds_checked"] > 0
