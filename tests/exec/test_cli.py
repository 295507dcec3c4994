from __future__ import annotations

import json
import subprocess
import sys

from typer.testing import CliRunner

from kvforensics.cli import app
from tests.exec.conftest import INCIDENT, POSTMORTEM, ROOT
from tests.reliability._run import run_cli

runner = CliRunner()


def test_exec_json_prefix():
    res = runner.invoke(app, ["exec", str(INCIDENT), "--policy", "prefix", "--format", "json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    for key in (
        "policy",
        "device",
        "backend",
        "oom",
        "model_oom",
        "agrees_with_model",
        "integrity",
        "rounds",
        "seconds",
    ):
        assert key in out
    assert out["policy"] == "prefix" and out["device"] == "cpu" and out["backend"] == "torch"
    assert out["oom"] == {"round": 3, "rid": "as-1keim4u1e8", "tokens": 2056, "available": 0}
    assert out["agrees_with_model"] is True and out["integrity"] == "ok"


def test_exec_json_fixed_many_inputs():
    res = runner.invoke(
        app, ["exec", str(INCIDENT), str(POSTMORTEM), "--policy", "fixed", "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert [o["oom"] for o in out] == [None, None]
    assert all(o["integrity"] == "ok" for o in out)


def test_exec_table():
    res = runner.invoke(app, ["exec", str(INCIDENT), "--layers", "2", "--kv-dim", "4"])
    assert res.exit_code == 0, res.output
    assert "as-1keim4u1e8" in res.stdout and "Prefill out of memory" in res.stdout


def test_bad_inputs():
    """Each is the user's error: exit 2 with one line saying what to do, nothing on stdout."""
    cases = [
        (["--policy", "nope"],
         "error: unknown policy 'nope'; choose from upstream, prefix, fixed, drain, park"),
        (["--backend", "triton", "--device", "cpu"],
         "error: the compiled Triton kernel needs CUDA; on CPU use --backend torch or interpret"),
    ]  # fmt: skip
    for flags, said in cases:
        out = run_cli("exec", INCIDENT, *flags)
        assert (out.code, out.stderr, out.stdout) == (2, said + "\n", ""), flags


def test_registration_does_not_import_torch():
    code = "import sys, kvforensics.cli; print('torch' in sys.modules, 'triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.split() == ["False", "False"], out.stderr


def test_missing_torch_is_one_line():
    # torch hidden from the import system: the command says how to install it
    code = (
        "import sys; sys.modules['torch'] = None\n"
        f"sys.argv = ['kvforensics', 'exec', {str(INCIDENT)!r}]\n"
        "from kvforensics.cli import main; main()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2
    assert (
        out.stderr.strip()
        == "error: kvforensics exec needs torch and triton: pip install -e '.[gpu]'"
    )
