"""``kvforensics exec``: re-execute a plan (pool snapshot + ordered pool steps) on a real
KV cache with an independent page allocator, to confirm an out-of-memory and that a fix
avoids it.

Planning needs no torch; ``execute`` and ``ExecResult`` are loaded on first use so that
importing this package (the CLI does, to register the command) never imports torch.
"""

from __future__ import annotations

from typing import Any

from kvforensics.exec.plan import (
    Plan,
    PoolSnapshot,
    Step,
    plan_from_result,
    plan_from_run,
    plan_from_scenario,
    snapshot_pool,
)

__all__ = [
    "ExecResult",
    "Plan",
    "PoolSnapshot",
    "Step",
    "execute",
    "plan_from_result",
    "plan_from_run",
    "plan_from_scenario",
    "snapshot_pool",
]

_LAZY = {"execute", "ExecResult"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from kvforensics.exec import runner

        return getattr(runner, name)
    raise AttributeError(name)
