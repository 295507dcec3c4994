"""Build script: the package is pure Python; with ``KVF_COMPILE=1`` the admission model
(``kvforensics/model``) and the replay's hot path (most of ``rounds`` and ``replay``, see
``COMPILED_MODULES``) are also compiled by mypyc from the same ``.py`` files.

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
#: the modules mypyc compiles, package by package: the admission model, and the stages a
#: replay runs per event and per round (the rebuild of the rounds, their re-runs and
#: checks). Every other module of these packages is named in ``INTERPRETED`` with why
#: (tests/test_compiled.py holds the two lists to the files).
COMPILED_MODULES = {
    "model": (
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
    ),
    "rounds": (
        "batch_index",
        "compact",
        "continuity",
        "crosscheck",
        "oom_place",
        "packed",
        "provenance",
        "rebuild",
        "reconcile",
        "records",
        "rows",
        "segment",
        "stream",
        "walk",
    ),
    "replay": (
        "arrivals",
        "checks",
        "fidelity",
        "passes",
        "state",
        "transfers",
        "whole_log",
    ),
    # the gap arithmetic every whole-log re-run calls; the rest of causes/ runs once a log
    "causes": ("gaps",),
}
#: the modules of those packages left interpreted, and why. The profile of a replay of a
#: 100 MB log puts under 0.1% of its CPU in any of them; the reader (``logs/``) is not
#: here at all: its per-event work is polars' (native), its Python runs once a chunk.
_ONCE = "runs once a log or a chunk, not per event or per round"
INTERPRETED = {
    "model": {
        "__init__": "only re-exports",
        "config": "the scenario schema reads Config's field annotations, which mypyc "
        "replaces by their runtime classes (Literal[...] becomes type)",
        "decisions": "the names of decisions and calls as string enums, read by the stages "
        "above the model; no model code runs through it",
    },
    "rounds": {
        "__init__": "only re-exports",
        "batches": _ONCE,
        "config": _ONCE,
        "drop": _ONCE,
        "ranks": _ONCE,
        "source": _ONCE,
        "writers": "the NDJSON/Parquet edge: json and polars do the work",
    },
    "replay": {
        "__init__": "only re-exports",
        "_checker": _ONCE,
        "anchor": _ONCE,
        "costs": _ONCE,
        "forward": _ONCE,
        "holds": _ONCE,
        "profile_choice": _ONCE,
        "ranges": "the byte-range split: workers and the join, once a range",
        "replay": "the command's driver: its per-round loop is passes.py's",
        "stages": _ONCE,
        "stock": _ONCE,
        "stock_trend": _ONCE,
        "stock_words": _ONCE,
        "unseen": _ONCE,
        "verdict": _ONCE,
    },
    "causes": {
        name: _ONCE
        for name in (
            "__init__",
            "arithmetic",
            "catalogue",
            "cause",
            "external",
            "oom",
            "pages",
            "pools",
            "replayed",
            "tail",
        )
    },
}
COMPILED = [
    f"kvforensics/{package}/{name}.py"
    for package, names in COMPILED_MODULES.items()
    for name in names
]


def _warn(message: str) -> None:
    print(f"kvforensics: {message}; building the pure-Python package", file=sys.stderr)


def wanted() -> bool:
    """``KVF_COMPILE`` is set, and this is a build (not the backend listing what the build
    needs, build_support/kvf_build.py)."""
    listing = os.environ.get("KVF_LISTING_BUILD_REQUIRES")
    return os.environ.get("KVF_COMPILE", "") not in ("", "0") and not listing


def compiled_extensions() -> list:
    """mypyc's extensions for ``COMPILED``, or none (not asked for, or mypyc not there)."""
    if not wanted():
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _warn("KVF_COMPILE is set but mypyc is not installed (pip install mypy)")
        return []
    try:
        # the shared runtime goes inside the package (kvforensics/_native__mypyc.*.so), where
        # an editable install finds it from any directory
        # KVF_OPT_LEVEL: the C compiler's level (3 by default; CI builds at 1, the same
        # code in a fraction of the compile time, and the benchmarks at 3)
        level = os.environ.get("KVF_OPT_LEVEL", "3")
        return mypycify(COMPILED, opt_level=level, group_name="kvforensics._native")
    except (Exception, SystemExit) as exc:  # mypyc reports type errors by exiting
        _warn(f"mypyc could not compile the modules ({exc})")
        return []


class OptionalBuildExt(build_ext):
    """``build_ext`` whose failure (no C compiler, a compile error) leaves the pure-Python
    package: what it built is removed, so no half-compiled package remains."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            for ext in self.extensions:
                Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)
                Path(ROOT, self.get_ext_filename(ext.name)).unlink(missing_ok=True)
            _warn(f"compiling failed ({exc})")


setup(ext_modules=compiled_extensions(), cmdclass={"build_ext": OptionalBuildExt})
