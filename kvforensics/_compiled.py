"""Which code runs: the modules mypyc compiled from their own ``.py`` source (a build with
``KVF_COMPILE=1``, see setup.py) or that same source, interpreted.

Both give the same results; ``kvforensics --version`` says which is in use, part by part
(``compiled: model, rounds, replay``). ``KVF_PURE_PYTHON=1`` in the environment runs the
source even where a compiled build sits beside it (``kvforensics/__init__.py``).
"""

from __future__ import annotations

from types import ModuleType

from kvforensics.causes import gaps
from kvforensics.model import adder, budget, node, pool, request, sizing
from kvforensics.replay import checks, passes, state, transfers, whole_log
from kvforensics.rounds import compact, packed, rebuild, records, rows, segment, stream

#: each part a compiled build compiles, by the modules of its hot path (a build compiles
#: them all, or none). ``replay`` takes in ``causes/gaps.py``, which its re-runs call.
PARTS: dict[str, tuple[ModuleType, ...]] = {
    "model": (adder, budget, node, pool, request, sizing),
    "rounds": (compact, packed, rebuild, records, rows, segment, stream),
    "replay": (checks, passes, state, transfers, whole_log, gaps),
}
#: every module of the hot path
HOT_PATH: tuple[ModuleType, ...] = tuple(m for part in PARTS.values() for m in part)


def is_compiled(module: ModuleType) -> bool:
    """Whether ``module`` was loaded from an extension (mypyc's) rather than its ``.py``."""
    return not (getattr(module, "__file__", None) or "").endswith(".py")


#: the hot path in use is mypyc's
COMPILED: bool = all(is_compiled(m) for m in HOT_PATH)


def describe() -> str:
    """What ``--version`` adds: ``compiled: model, rounds, replay`` or ``pure Python``."""
    if COMPILED:
        return "compiled: " + ", ".join(PARTS)
    if any(is_compiled(m) for m in HOT_PATH):  # a build that stopped half-way
        return "partly compiled: " + ", ".join(
            m.__name__.removeprefix("kvforensics.") for m in HOT_PATH if is_compiled(m)
        )
    return "pure Python"
