"""Which admission model runs: the one mypyc compiled from ``kvforensics/model``'s source
(a build with ``KVF_COMPILE=1``, see setup.py) or that same source, interpreted.

Both give the same decisions; ``kvforensics --version`` says which is in use.
"""

from __future__ import annotations

from types import ModuleType

from kvforensics.model import adder, budget, node, pool, request, sizing

#: the modules of the hot path (a compiled build compiles them all, or none)
HOT_PATH: tuple[ModuleType, ...] = (adder, budget, node, pool, request, sizing)


def is_compiled(module: ModuleType) -> bool:
    """Whether ``module`` was loaded from an extension (mypyc's) rather than its ``.py``."""
    return not (getattr(module, "__file__", None) or "").endswith(".py")


#: the model in use is mypyc's
COMPILED: bool = all(is_compiled(m) for m in HOT_PATH)


def describe() -> str:
    """What ``--version`` adds: ``compiled: model`` or ``pure Python``."""
    if COMPILED:
        return "compiled: model"
    if any(is_compiled(m) for m in HOT_PATH):  # a build that stopped half-way
        return "partly compiled: " + ", ".join(
            m.__name__.rsplit(".", 1)[1] for m in HOT_PATH if is_compiled(m)
        )
    return "pure Python"
