"""The build backend: setuptools', with mypy added to the build requirements when
``KVF_COMPILE`` asks for the compiled model (setup.py), so that pip's isolated build
environment has mypyc. A plain build asks for nothing beyond setuptools."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the rest of the backend, unchanged)

#: what mypyc needs at build time (the ``compile`` extra names the same)
COMPILE_REQUIRES = ["mypy>=1.10"]
#: set while setup.py runs only to list the build requirements (setup.py reads it)
LISTING = "KVF_LISTING_BUILD_REQUIRES"


def _compile_requires() -> list[str]:
    return COMPILE_REQUIRES if os.environ.get("KVF_COMPILE", "") not in ("", "0") else []


@contextmanager
def _listing() -> Iterator[None]:
    """setuptools runs setup.py to list the requirements and to write the metadata: it
    must not compile (nor warn that mypyc is missing) there, only when it builds (mypyc
    type-checks and translates the modules as setup.py runs: minutes each time)."""
    os.environ[LISTING] = "1"
    try:
        yield
    finally:
        del os.environ[LISTING]


def _requires(hook: Callable[[dict | None], list[str]], config_settings: dict | None) -> list[str]:
    with _listing():
        return hook(config_settings) + _compile_requires()


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: dict | None = None
) -> str:
    with _listing():
        return _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(
    metadata_directory: str, config_settings: dict | None = None
) -> str:
    with _listing():
        return _setuptools.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def get_requires_for_build_wheel(config_settings: dict | None = None) -> list[str]:
    return _requires(_setuptools.get_requires_for_build_wheel, config_settings)


def get_requires_for_build_editable(config_settings: dict | None = None) -> list[str]:
    return _requires(_setuptools.get_requires_for_build_editable, config_settings)
