"""What ``kvforensics exec`` does, as a library call: check the options, plan each input
(a scenario, or one incident's logs), perform every plan, and keep what the log reader
could not read so the command can pass it on."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kvforensics.errors import InputError, KvfError
from kvforensics.model.policies import AS_RAN

if TYPE_CHECKING:  # torch is imported only once the options are known to be good
    from kvforensics.exec.plan import Plan
    from kvforensics.exec.runner import ExecResult
    from kvforensics.replay import ReplayOptions

INSTALL = "kvforensics exec needs torch and triton: pip install -e '.[gpu]'"
DTYPE_NAMES = ("bf16", "fp16", "fp32")

#: given a plan about to run, the callback its steps report progress to (done, total)
OnPlan = Callable[["Plan"], Callable[[int, int], None] | None]


@dataclass(frozen=True, slots=True)
class ExecOptions:
    """How to perform the plans: the policy, where, and the KV layout (None: the default
    of the device)."""

    policy: str = AS_RAN
    device: str | None = None
    backend: str = "auto"
    layers: int | None = None
    kv_dim: int | None = None
    rope_dim: int | None = None
    dtype: str = "bf16"
    check_rounds: bool = True

    def check(self) -> None:
        """A one-line error for a value no run can take, before any input is read."""
        from kvforensics.model import POLICIES

        if self.policy not in POLICIES:
            raise InputError(f"unknown policy {self.policy!r}; choose from {', '.join(POLICIES)}")
        for n, name in ((self.layers, "--layers"), (self.kv_dim, "--kv-dim")):
            if n is not None and n <= 0:
                raise InputError(f"{name} must be positive")
        if self.rope_dim is not None and self.rope_dim < 0:
            raise InputError("--rope-dim must be >= 0")
        try:
            import torch  # noqa: F401
        except ImportError:
            raise KvfError(INSTALL) from None
        if self.dtype not in DTYPE_NAMES:
            raise InputError(f"unknown dtype {self.dtype!r}; choose from {', '.join(DTYPE_NAMES)}")


@dataclass(slots=True)
class ExecRun:
    """Every plan's result, and the notes of the log reader (empty for scenarios)."""

    results: list[ExecResult] = field(default_factory=list)

    @property
    def log_notes(self) -> list[str]:
        return [n for r in self.results for n in r.log_notes]

    @property
    def failed(self) -> bool:
        """The allocator disagreed with the model, or the KV read back wrong."""
        return any(not r.agrees_with_model or r.integrity for r in self.results)


def plans(inputs: Sequence[Path], policy: str, replay: ReplayOptions | None = None) -> list[Plan]:
    """One plan per scenario file, or one plan for a set of log files (one incident;
    ``replay``: how the logs are read)."""
    from kvforensics.exec.plan import plan_from_replay, plan_from_scenario
    from kvforensics.report.inputs import are_logs

    if are_logs(list(inputs)):
        return [plan_from_replay([str(p) for p in inputs], policy, replay)]
    if not all(p.suffix.lower() == ".toml" for p in inputs):
        raise InputError("exec takes scenario TOML files, or the log files of one incident")
    return [plan_from_scenario(str(p), policy) for p in inputs]


def run_exec(
    inputs: Sequence[Path],
    opts: ExecOptions,
    replay: ReplayOptions | None = None,
    on_plan: OnPlan | None = None,
) -> ExecRun:
    """Check ``opts``, plan every input and perform each plan (``replay``: how the logs
    are read when the inputs are logs)."""
    opts.check()
    from kvforensics.exec.runner import DTYPES, execute

    run = ExecRun()
    for plan in plans(inputs, opts.policy, replay):
        run.results.append(
            execute(
                plan,
                device=opts.device,
                backend=opts.backend,
                layers=opts.layers,
                kv_dim=opts.kv_dim,
                rope_dim=opts.rope_dim,
                dtype=DTYPES[opts.dtype],
                check_rounds=opts.check_rounds,
                on_step=on_plan(plan) if on_plan is not None else None,
            )
        )
    return run
