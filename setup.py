"""Build script: the package is pure Python; with ``KVF_COMPILE=1`` the admission model
(``kvforensics/model``) is also compiled by mypyc from the same ``.py`` files.

The compiled build is opt-in and never in the way of an install: without the variable,
or without mypyc, or when the C compiler fails, the result is the pure-Python package
(with a warning in the last two cases). ``kvforensics --version`` says which one runs.

    KVF_COMPILE=1 pip install -e .          # editable: the .so files land next to the .py
    KVF_COMPILE=1 python setup.py build_ext --inplace   # the same, in a ready environment

``build_support/kvf_build.py``, the build backend, adds mypy to the build requirements
when the variable is set, so the same commands work under pip's build isolation.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
#: the modules mypyc compiles. Left interpreted: ``__init__`` (it only re-exports),
#: ``config`` (the scenario schema reads ``Config``'s field annotations, which mypyc
#: replaces by their runtime classes: ``Literal[...]`` becomes ``type``) and ``decisions``
#: (the names of decisions and calls as string enums, read by the stages above the model;
#: no model code runs through it).
COMPILED = [
    f"kvforensics/model/{name}.py"
    for name in (
        "adder",
        "budget",
        "ledger",
        "node",
        "policies",
        "pool",
        "prefix_cache",
        "profiles",
        "radix",
        "request",
        "sizing",
    )
]


def _warn(message: str) -> None:
    print(f"kvforensics: {message}; building the pure-Python package", file=sys.stderr)


def wanted() -> bool:
    """``KVF_COMPILE`` is set, and this is a build (not the backend listing what the build
    needs, build_support/kvf_build.py)."""
    listing = os.environ.get("KVF_LISTING_BUILD_REQUIRES")
    return os.environ.get("KVF_COMPILE", "") not in ("", "0") and not listing


def compiled_extensions() -> list:
    """mypyc's extensions for the model, or none (not asked for, or mypyc not there)."""
    if not wanted():
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _warn("KVF_COMPILE is set but mypyc is not installed (pip install mypy)")
        return []
    try:
        # the shared runtime goes inside the package (kvforensics/_model__mypyc.*.so), where
        # an editable install finds it from any directory
        return mypycify(COMPILED, opt_level="3", group_name="kvforensics._model")
    except (Exception, SystemExit) as exc:  # mypyc reports type errors by exiting
        _warn(f"mypyc could not compile the model ({exc})")
        return []


class OptionalBuildExt(build_ext):
    """``build_ext`` whose failure (no C compiler, a compile error) leaves the pure-Python
    package: what it built of the model is removed, so no half-compiled model remains."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            for ext in self.extensions:
                Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)
                Path(ROOT, self.get_ext_filename(ext.name)).unlink(missing_ok=True)
            _warn(f"compiling the model failed ({exc})")


setup(ext_modules=compiled_extensions(), cmdclass={"build_ext": OptionalBuildExt})
