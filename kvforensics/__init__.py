"""kvforensics: replay prefill scheduling rounds from logs and explain KV out-of-memory crashes.

Data flows one way: log files -> events (``logs``) -> rounds (``rounds``) -> ledgers per
policy (``model``, ``replay``) -> verdict/diff -> report (``report``). ``exec`` re-runs the
replayed plan on real KV tensors.
"""

from __future__ import annotations

import os as _os

__version__ = "0.1.0"

if _os.environ.get("KVF_PURE_PYTHON", "") not in ("", "0"):
    # Run the .py files even where a compiled build (KVF_COMPILE=1, setup.py) sits beside
    # them: the fallback, on demand (benchmarks, bisecting a difference between the two).
    import importlib.machinery as _machinery
    import sys as _sys
    from collections.abc import Sequence as _Sequence
    from types import ModuleType as _ModuleType

    class _SourceOnly(_machinery.PathFinder):
        """Finds this package's modules among the source files only."""

        @classmethod
        def find_spec(
            cls,
            fullname: str,
            path: _Sequence[str] | None = None,
            target: _ModuleType | None = None,
        ) -> _machinery.ModuleSpec | None:
            if not fullname.startswith(__name__ + "."):
                return None
            loaders = [(_machinery.SourceFileLoader, _machinery.SOURCE_SUFFIXES)]
            for entry in path or ():
                spec = _machinery.FileFinder(entry, *loaders).find_spec(fullname, target)
                if spec is not None:
                    return spec
            return None

    _sys.meta_path.insert(0, _SourceOnly)
