"""The build backend: setuptools', with mypy added to the build requirements when
``KVF_COMPILE`` asks for the compiled model (setup.py), so that pip's isolated build
environment has mypyc. A plain build asks for nothing beyond setuptools."""

from __future__ import annotations

import os
from collections.abc import Callable

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the rest of the backend, unchanged)

#: what mypyc needs at build time (the ``compile`` extra names the same)
COMPILE_REQUIRES = ["mypy>=1.10"]
#: set while setup.py runs only to list the build requirements (setup.py reads it)
LISTING = "KVF_LISTING_BUILD_REQUIRES"


def _compile_requires() -> list[str]:
    return COMPILE_REQUIRES if os.environ.get("KVF_COMPILE", "") not in ("", "0") else []


def _requires(hook: Callable[[dict | None], list[str]], config_settings: dict | None) -> list[str]:
    # setuptools runs setup.py to list the requirements: it must not compile (nor warn
    # that mypyc is missing) there, only when it builds
    os.environ[LISTING] = "1"
    try:
        return hook(config_settings) + _compile_requires()
    finally:
        del os.environ[LISTING]


def get_requires_for_build_wheel(config_settings: dict | None = None) -> list[str]:
    return _requires(_setuptools.get_requires_for_build_wheel, config_settings)


def get_requires_for_build_editable(config_settings: dict | None = None) -> list[str]:
    return _requires(_setuptools.get_requires_for_build_editable, config_settings)
