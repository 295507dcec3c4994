"""`kvforensics reproduce`: from an incident (its logs, or a scenario) to the smallest
scenario that still shows the same cause, and a unit test against SGLang's own adder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvforensics.cli._app import app
from kvforensics.cli._common import console, print_json, print_para
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
    TransferSeconds,
    check_format,
)
from kvforensics.errors import InputError
from kvforensics.outputs import check_output
from kvforensics.reproduce.make import Reproducer, reproducer_for


@app.command()
def reproduce(
    inputs: Annotated[
        list[Path], typer.Argument(help="Log files of the incident, or a scenario TOML.")
    ],
    out: Annotated[Path, typer.Option("-o", "--out", help="Directory to write into.")] = Path(
        "reproducer"
    ),
    policy: Annotated[
        str, typer.Option(help="The fix the reproducer must be avoided by.")
    ] = "fixed",
    target: Annotated[
        str, typer.Option(help="Whose adder the test runs: fork | sglang-0.5.23.")
    ] = "fork",
    fmt: Annotated[str, typer.Option("--format", help="table | json")] = "table",
    transfer_seconds: TransferSeconds = None,
    page_size: PageSize = None,
    align: Align = None,
    chunk_size: Chunk = None,
    pool_size: Pool = None,
    rank: Rank = None,
    formats: Formats = None,
    profile: ProfileName = None,
    no_progress: NoProgress = False,
) -> None:
    """Shrink an incident to its smallest reproducer: a scenario (reproducer.toml) and a
    PrefillAdder unit test that fails on the code as it ran and passes with the fix."""
    check_format(fmt, ("table", "json"))
    check_output(out, inputs, directory=True)
    if out.is_dir() and any(out.iterdir()):
        raise InputError(f"{out} is not empty: give a new directory")
    opts = LogOptions(page_size, align, chunk_size, pool_size, rank, formats, transfer_seconds,
                      None, None, no_progress, profile=profile)  # fmt: skip
    with opts.stages():
        rep = reproducer_for(inputs, opts.replay_options(), target=target, fix=policy)
    paths = rep.write(out)
    if fmt == "json":
        print_json({**rep.as_dict(), "files": [str(p) for p in paths]})
        return
    _show(rep, out, paths)


def _show(rep: Reproducer, out: Path, paths: list[Path]) -> None:
    s = rep.summary()
    console.print(
        f"Reproducer of {rep.shrunk.chain.kind} (target {rep.target}, fix {rep.fix}): "
        f"{s.requests} of {s.requests_before} requests, pool {s.pool_size} of "
        f"{s.pool_size_before}; {s.kept} of {s.tried} reductions kept ({s.seconds:.1f} s)",
        highlight=False,
    )
    for line in rep.story():
        print_para(line)
    for p in paths:
        console.print(f"wrote {p}", highlight=False)
    if rep.tests:
        console.print("Tests: " + ", ".join(t.name for t in rep.tests), highlight=False)
        console.print("Run them:", highlight=False)
        for cmd in rep.run_commands(str(out)):
            console.print(f"  {cmd}", highlight=False, soft_wrap=True)
    for line in (*rep.omitted, *rep.keeps, *rep.drops):
        print_para(line)
