"""`kvforensics report`: write the postmortem attachment for a scenario."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvforensics.cli._app import app
from kvforensics.cli._common import console, split_policies
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
)
from kvforensics.errors import InputError
from kvforensics.outputs import check_output
from kvforensics.replay import EXIT_MISMATCH, EXIT_NOT_REPRODUCED
from kvforensics.replay.replay import ReplayResult
from kvforensics.report import manifest
from kvforensics.report.inputs import are_logs, replay_inputs, scenario_runs
from kvforensics.report.report import write_report
from kvforensics.report.story import HISTORY_ROUNDS, history, log_report
from kvforensics.reproduce.case import Case
from kvforensics.reproduce.make import case_from_replay, case_from_scenario

#: why a report on logs exits non-zero (the codes replay uses)
EXIT_WHY = {
    EXIT_MISMATCH: "a logged number differs from the model's, or the evidence contradicts itself",
    EXIT_NOT_REPRODUCED: "the logged out-of-memory is not reproduced under prefix",
}


@app.command()
def report(
    inputs: Annotated[list[Path], typer.Argument(help="A scenario TOML, or log files to replay.")],
    out: Annotated[Path, typer.Option("-o", "--out", help="Directory to write into.")],
    policy: Annotated[
        str, typer.Option(help="Comma-separated policies.")
    ] = "prefix,fixed,upstream,drain,park",
    round_no: Annotated[
        int | None, typer.Option("--round", help="Round to explain (default: where policies part).")
    ] = None,
    title: Annotated[str | None, typer.Option(help="Report title.")] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Replace an earlier report's files in OUT (nothing else is touched)."
        ),
    ] = False,
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
    reproduce: Annotated[
        bool,
        typer.Option(
            "--reproduce",
            help="Also write the smallest reproducer (`kvforensics reproduce`: scenario and "
            "adder test, fork's rules, fixed) beside it, with a section in report.md.",
        ),
    ] = False,
    no_progress: NoProgress = False,
) -> None:
    """Write report.md, figures, ledgers and events (Parquet and CSV) for a replay or a scenario.

    On logs it exits as replay does, once the files are written: 0 the model agrees with
    the log, 3 a logged number differs from the model's or the evidence contradicts
    itself, 4 the logged out-of-memory is not reproduced under prefix (2: bad input).
    """
    names = split_policies(policy)
    check_output(out, inputs, directory=True)
    manifest.claim(out, [], force)  # a non-empty OUT is refused before any work
    opts = LogOptions(
        page_size, align, chunk_size, pool_size, rank, formats, transfer_seconds, since, until,
        no_progress, profile=profile,
    )  # fmt: skip
    with opts.stages():
        if are_logs(inputs):
            rr, paths = _on_logs(inputs, out, names, opts, round_no, title, force, reproduce)
        else:
            paths = _on_scenario(inputs, out, names, round_no, title, force, reproduce)
    for p in paths:
        console.print(str(p), markup=False)
    if are_logs(inputs):
        code = rr.exit_code()
        if code in EXIT_WHY:
            typer.echo(f"exit {code}: {EXIT_WHY[code]} (see report.md)", err=True)
        raise typer.Exit(code)


def _reproducer(out: Path, case: Case, source: str, logs: bool) -> tuple[list[str], dict[str, str]]:
    """The reproducer's section of report.md and its files (``--reproduce``)."""
    from kvforensics.reproduce.make import make

    rep = make(case, source=source, logs=logs)
    return rep.markdown(str(out)), rep.files()


def _on_logs(
    inputs: list[Path], out: Path, names: list[str], opts: LogOptions, round_no: int | None,
    title: str | None, force: bool, reproduce: bool = False,
) -> tuple[ReplayResult, list[Path]]:
    """Replay the logs and write their report: (the replay, the files written)."""
    rr, results = replay_inputs(inputs, names, opts.replay_options(costs=True))
    head, story, evidence = log_report(rr, names, inputs)
    assert rr.profile is not None  # a replay of logs always says which profile it ran
    paths = write_report(
        out,
        results,
        title=title or head,
        story=story,
        evidence=evidence,
        events=rr.events,
        focus_round=round_no if round_no is not None else rr.start_round,
        inputs=inputs,
        force=force,
        history=history(rr, HISTORY_ROUNDS),
        log_notes=rr.summary.notes(),
        sizing=(rr.rebuild.cfg, rr.profile.profile),
        reproducer=(
            _reproducer(out, case_from_replay(rr), ", ".join(map(str, inputs)), True)
            if reproduce
            else None
        ),
    )
    return rr, paths


def _on_scenario(
    inputs: list[Path], out: Path, names: list[str], round_no: int | None, title: str | None,
    force: bool, reproduce: bool = False,
) -> list[Path]:
    if len(inputs) != 1:
        raise InputError("report takes one scenario, or log files")
    results, sizing = scenario_runs(inputs[0], names)
    repro = None
    if reproduce:
        from kvforensics.scenario import load_scenario

        sc = load_scenario(inputs[0])
        repro = _reproducer(out, case_from_scenario(sc, f"{sc.name}-repro"), str(inputs[0]), False)
    return write_report(
        out,
        results,
        title=title or f"{inputs[0].stem}: prefill admission under {', '.join(names)}",
        focus_round=round_no,
        inputs=inputs,
        force=force,
        sizing=sizing,
        reproducer=repro,
    )
