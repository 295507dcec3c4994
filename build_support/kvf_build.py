"""The build backend: setuptools', with mypy added to the build requirements when
``KVF_COMPILE`` asks for the compiled model (setup.py), so that pip's isolated build
environment has mypyc. A plain build asks for nothing beyond setuptools."""

from __future__ import annotations

import os

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the rest of the backend, unchanged)

#: what mypyc needs at build time (the ``compile`` extra names the same)
COMPILE_REQUIRES = ["mypy>=1.10"]


def _compile_requires() -> list[str]:
    return COMPILE_REQUIRES if os.environ.get("KVF_COMPILE", "") not in ("", "0") else []


def get_requires_for_build_wheel(config_settings: dict | None = None) -> list[str]:
    return _setuptools.get_requires_for_build_wheel(config_settings) + _compile_requires()


def get_requires_for_build_editable(config_settings: dict | None = None) -> list[str]:
    return _setuptools.get_requires_for_build_editable(config_settings) + _compile_requires()
