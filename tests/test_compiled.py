"""Which admission model runs: mypyc's build of ``kvforensics/model`` or its source.

Both give the same decisions (CI runs the model's, the rounds' and the replay's tests on
both). ``KVF_EXPECT_COMPILED`` (1 or 0), set by CI, says which one the run must be on, so
that a build that quietly fell back to pure Python cannot pass for a compiled one.
"""

from __future__ import annotations

import ast
import os

import pytest

from kvforensics import _compiled
from tests.conftest import ROOT


def test_the_version_says_which_model_runs():
    from typer.testing import CliRunner

    from kvforensics.cli import app

    out = CliRunner().invoke(app, ["--version"]).output.strip()
    want = "(compiled: model)" if _compiled.COMPILED else "(pure Python)"
    assert out.endswith(want), out


def test_compiled_means_every_hot_path_module_is_an_extension():
    files = [m.__file__ for m in _compiled.HOT_PATH]
    assert all(not f.endswith(".py") for f in files) == _compiled.COMPILED, files
    if not any(not f.endswith(".py") for f in files):
        assert _compiled.describe() == "pure Python"


@pytest.mark.skipif("KVF_EXPECT_COMPILED" not in os.environ, reason="CI says which to expect")
def test_the_model_in_use_is_the_one_ci_built():
    assert (os.environ["KVF_EXPECT_COMPILED"] == "1") == _compiled.COMPILED, _compiled.describe()


def _setup_list(name: str) -> list[str]:
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == name:
            return [e.value for e in node.value.generators[0].iter.elts]  # type: ignore[attr-defined]
    raise AssertionError(f"setup.py has no {name}")


def test_setup_compiles_every_model_module_but_the_ones_it_names():
    """A new module of the model is compiled unless setup.py says why not."""
    compiled = set(_setup_list("COMPILED"))
    modules = {p.stem for p in (ROOT / "kvforensics" / "model").glob("*.py")}
    assert modules - compiled == {"__init__", "config", "decisions"}
    assert {m.__name__.rsplit(".", 1)[1] for m in _compiled.HOT_PATH} <= compiled
