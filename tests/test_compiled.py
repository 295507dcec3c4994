"""Which code runs: mypyc's build of the model and of the replay's hot path
(``rounds``, ``replay``; setup.py) or their source.

Both give the same results (CI runs the model's, the rounds' and the replay's tests on
both). ``KVF_EXPECT_COMPILED`` (1 or 0), set by CI, says which one the run must be on, so
that a build that quietly fell back to pure Python cannot pass for a compiled one.
"""

from __future__ import annotations

import ast
import os

import pytest

from kvforensics import _compiled
from tests.conftest import ROOT


def test_the_version_says_which_code_runs():
    from typer.testing import CliRunner

    from kvforensics.cli import app

    out = CliRunner().invoke(app, ["--version"]).output.strip()
    want = "(compiled: model, rounds, replay)" if _compiled.COMPILED else "(pure Python)"
    assert out.endswith(want), out


def test_pure_python_on_demand_runs_the_source():
    """``KVF_PURE_PYTHON=1`` loads every module from its ``.py`` file, compiled build or not."""
    import subprocess
    import sys

    code = (
        "from kvforensics import _compiled as c; "
        "print(c.describe(), all(m.__file__.endswith('.py') for m in c.HOT_PATH))"
    )
    env = {**os.environ, "KVF_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, cwd=ROOT)  # fmt: skip
    assert out.stdout.split() == ["pure", "Python", "True"], out


def test_compiled_means_every_hot_path_module_is_an_extension():
    files = [m.__file__ for m in _compiled.HOT_PATH]
    assert all(not f.endswith(".py") for f in files) == _compiled.COMPILED, files
    if not any(not f.endswith(".py") for f in files):
        assert _compiled.describe() == "pure Python"


@pytest.mark.skipif("KVF_EXPECT_COMPILED" not in os.environ, reason="CI says which to expect")
def test_the_model_in_use_is_the_one_ci_built():
    assert (os.environ["KVF_EXPECT_COMPILED"] == "1") == _compiled.COMPILED, _compiled.describe()


def _setup_dict(name: str) -> dict:
    """``name``'s value in setup.py (a dict of literals; a comprehension of them evaluated
    with ``_ONCE``, the reason they share)."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = node.value
    if name not in found:
        raise AssertionError(f"setup.py has no {name}")
    env = {"_ONCE": ast.literal_eval(found["_ONCE"])}
    return eval(compile(ast.Expression(found[name]), "setup.py", "eval"), env)


def test_setup_compiles_every_module_of_its_packages_but_the_ones_it_names():
    """A new module of a compiled package is compiled unless setup.py says why not."""
    compiled = _setup_dict("COMPILED_MODULES")
    interpreted = _setup_dict("INTERPRETED")
    assert set(compiled) == set(interpreted) == {"model", "rounds", "replay", "causes"}
    for package, names in compiled.items():
        modules = {p.stem for p in (ROOT / "kvforensics" / package).glob("*.py")}
        assert not set(names) & set(interpreted[package]), package
        assert set(names) | set(interpreted[package]) == modules, package
        assert all(interpreted[package].values()), f"{package}: a module left without why"
    assert set(interpreted["model"]) == {"__init__", "config", "decisions"}
    for m in _compiled.HOT_PATH:
        package, name = m.__name__.split(".")[1:]
        assert name in compiled[package], m.__name__


def test_every_part_the_version_names_is_compiled_by_setup():
    compiled = _setup_dict("COMPILED_MODULES")
    assert set(_compiled.PARTS) <= set(compiled)
