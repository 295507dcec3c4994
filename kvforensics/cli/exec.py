"""`kvforensics exec`: re-execute a run's rounds on a real KV cache (torch/Triton).

torch is imported only when the command runs, so registering it costs nothing and a
machine without the ``gpu`` extra gets a one-line hint instead of a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from kvforensics.cli._app import app
from kvforensics.cli._common import console, print_json, print_notes
from kvforensics.cli._inputs import (
    Align,
    Chunk,
    Formats,
    LogOptions,
    NoProgress,
    PageSize,
    Pool,
    ProfileName,
    Rank,
    Since,
    TransferSeconds,
    Until,
    check_format,
)
from kvforensics.model.policies import AS_RAN
from kvforensics.report.terminal import literal

if TYPE_CHECKING:  # torch comes with the runner: only a run imports it
    from kvforensics.exec.plan import ExecOom, Plan
    from kvforensics.exec.runner import ExecResult


@app.command("exec")
def exec_(
    inputs: Annotated[
        list[Path],
        typer.Argument(
            metavar="SCENARIO_OR_LOG...", help="Scenario TOML files, or one incident's log files."
        ),
    ],
    policy: Annotated[str, typer.Option(help="prefix | fixed | upstream | drain")] = AS_RAN,
    device: Annotated[
        str | None, typer.Option(help="cuda | cpu (default: cuda when there is one)")
    ] = None,
    backend: Annotated[str, typer.Option(help="auto | triton | torch | interpret")] = "auto",
    layers: Annotated[
        int | None, typer.Option(help="KV layers (default 61 on CUDA, 1 on CPU)")
    ] = None,
    kv_dim: Annotated[
        int | None, typer.Option("--kv-dim", help="latent width (default 512 on CUDA, 8 on CPU)")
    ] = None,
    rope_dim: Annotated[
        int | None, typer.Option("--rope-dim", help="rope width (default 64 on CUDA, 0 on CPU)")
    ] = None,
    dtype: Annotated[str, typer.Option(help="bf16 | fp16 | fp32")] = "bf16",
    round_checks: Annotated[
        bool, typer.Option(help="Read all live KV back after every round (always at the end).")
    ] = True,
    fmt: Annotated[str, typer.Option("--format", help="table | json")] = "table",
    transfer_seconds: TransferSeconds = None,
    page_size: PageSize = None,
    align: Align = None,
    chunk_size: Chunk = None,
    pool_size: Pool = None,
    rank: Rank = None,
    formats: Formats = None,
    since: Since = None,
    until: Until = None,
    profile: ProfileName = None,
    no_progress: NoProgress = False,
) -> None:
    """Perform each round's allocations, load-backs and writes on a real KV cache with an
    independent allocator; confirm the out-of-memory (or its absence) and KV integrity.

    Exits 1 when the allocator disagrees with the model or integrity fails."""
    from kvforensics.exec.command import ExecOptions, run_exec

    check_format(fmt, ("table", "json"))
    logs = LogOptions(
        page_size, align, chunk_size, pool_size, rank, formats, transfer_seconds, since, until,
        no_progress, profile=profile,
    )  # fmt: skip
    opts = ExecOptions(policy, device, backend, layers, kv_dim, rope_dim, dtype, round_checks)
    with logs.stages() as st:

        def on_plan(plan: Plan) -> Callable[[int, int], None]:
            steps = st.stage(f"exec {plan.name} [{policy}]", len(plan.steps), "steps")
            return lambda done, _total: steps.to(done)

        run = run_exec(inputs, opts, logs.replay_options(), on_plan)
    print_notes(run.log_notes)
    if fmt == "json":
        out = [r.as_dict() for r in run.results]
        print_json(out[0] if len(out) == 1 else out)
    else:
        for r in run.results:
            _table(r)
    if run.failed:
        raise typer.Exit(1)


def _oom_text(oom: ExecOom | None) -> str:
    if oom is None:
        return "none"
    return f"round {oom.round}, {literal(oom.rid)}: {oom.tokens} tokens, {oom.available} available"


def _table(r: ExecResult) -> None:
    lay, stats = r.layout, r.stats
    t = Table(title=f"exec {r.name} [{r.policy}]", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    t.add_row("device / backend", f"{r.device} / {r.backend}")
    t.add_row(
        "KV pool",
        f"{stats.slots} slots, page {stats.page_size}, {lay.layers} layers x "
        f"({lay.kv_lora_rank} + {lay.rope_dim}) {lay.dtype_name}, "
        f"{stats.kv_bytes / 2**30:.2f} GiB",
    )
    t.add_row("out of memory (exec)", _oom_text(r.oom))
    t.add_row("out of memory (model)", _oom_text(r.model_oom))
    agree = "[green]yes[/]" if r.agrees_with_model else "[red]no[/]"
    t.add_row("agrees with model", agree)
    integ = "[green]ok[/]" if not r.integrity else f"[red]{len(r.integrity)} failures[/]"
    t.add_row("KV integrity", integ)
    t.add_row("rounds executed", str(r.rounds))
    t.add_row("completed", literal(", ".join(r.completed) or "-"))
    if r.incomplete:
        t.add_row("not completed", literal(", ".join(r.incomplete)))
    t.add_row("rows written / loaded back", f"{stats.rows_written} / {stats.rows_loaded_back}")
    t.add_row("pages evicted / reused", f"{stats.pages_evicted} / {stats.pages_reused}")
    t.add_row("seconds", f"{r.seconds:.2f}")
    console.print(t)
    if r.oom_message:
        console.print(r.oom_message, markup=False, highlight=False)
    for line in r.integrity[:20]:
        console.print(f"[red]integrity:[/] {literal(line)}")
    for note in r.notes:
        console.print(f"note: {note}", markup=False)
