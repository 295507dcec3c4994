"""`kvforensics replay`: the command to run after a crash.

Exit codes: 0 the replay agrees with the log; 2 bad input; 3 the model disagrees with a
logged number or the evidence contradicts itself (listed); 4 the logged out-of-memory was
not reproduced under `prefix`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from kvforensics.causes.tail import held_root_cause
from kvforensics.cli._app import app
from kvforensics.cli._common import (
    console,
    print_contradictions,
    print_json,
    print_log_summary,
    print_para,
    split_policies,
)
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
from kvforensics.replay import replay_logs, verdict_text
from kvforensics.replay.ranges import check_engine
from kvforensics.replay.replay import ReplayResult
from kvforensics.replay.stock import NoAdderLines, StockAnalysis
from kvforensics.replay.stock_words import release_line, stock_text
from kvforensics.replay.verdict import first_token_delays
from kvforensics.replay.whole_log import WholeLog
from kvforensics.report.terminal import FitTable, literal
from kvforensics.scan import whole_log, whole_log_dict
from kvforensics.scan.terminal import whole_log_line


@app.command()
def replay(
    logs: Annotated[list[Path], typer.Argument(help="Log files of the incident (PP0 at least).")],
    policy: Annotated[
        str, typer.Option(help="Policies to run besides prefix.")
    ] = "fixed,upstream,drain,park",
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
    jobs: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=256,
            help="Workers: N splits one plain log into N byte ranges, each read, rebuilt "
            "and re-run by a worker, joined into the same output as 1; other inputs (several "
            "files, gzip) re-run the rounds in a second process; default: that second "
            "process for logs of 32 MB or more on two CPUs or more, else 1.",
        ),
    ] = None,
    engine: Annotated[
        str, typer.Option(help="Where --jobs' workers run: local (processes) | ray.")
    ] = "local",
    no_progress: NoProgress = False,
) -> None:
    """Rebuild the rounds, check the model against them, re-run them under each policy."""
    check_format(fmt, ("table", "json"))
    check_engine(engine)
    opts = LogOptions(
        page_size, align, chunk_size, pool_size, rank, formats, transfer_seconds, since, until,
        no_progress, profile=profile,
    )  # fmt: skip
    options = opts.replay_options(
        split_policies(policy), stream=True, whole_log=True, jobs=jobs, engine=engine
    )
    stock: StockAnalysis | None = None
    with opts.stages():
        try:
            rr = replay_logs(logs, options)
        except NoAdderLines as no:
            if not no.release:  # a fork's or a decode node's log: nothing to say of it
                raise
            stock = no.stock()  # a release's log: what it can tell
    if stock is not None:
        _print_stock(stock, fmt)
    wl = whole_log(rr)
    if fmt == "json":
        print_json(rr.as_dict() | {"whole_log": whole_log_dict(wl)})
        sys.exit(rr.exit_code())
    _print_replay(rr, wl)
    sys.exit(rr.exit_code())


def _print_replay(rr: ReplayResult, wl: WholeLog) -> None:
    """The replay on the terminal: what was read, the logged out-of-memory, fidelity,
    the policies, the verdict and what it assumes."""
    print_log_summary(rr.summary)
    o = rr.observed_oom
    if not o and rr.summary.cut_lines:
        console.print(
            "[yellow]The log is cut short: an out-of-memory after the cut would not show.[/]"
        )
    if o:
        others = (("swa", o.swa_available), ("mamba", o.mamba_available))
        console.print(
            f"[bold]Logged out of memory[/]: round {o.round}, {literal(o.rid)}, "
            f"Try to allocate {o.tokens} tokens, {o.available} available"
            + "".join(f" ({pool} pool: {n} available)" for pool, n in others if n is not None)
        )
    else:
        console.print("[bold]No out of memory in these logs.[/]")
    print_para(whole_log_line(wl), indent=0, hang=2)
    _print_fidelity(rr)
    console.print(_policy_table(rr), highlight=False)
    base = rr.results.get(AS_RAN)
    for name, res in rr.results.items():
        if base is None or name == AS_RAN:
            continue
        for x in (x for x in first_token_delays(base, res) if x.delay_s):
            print_para(f"{name}: {x.rid} first token {x.delay_s:+.2f} s later than under prefix")
    console.print("[bold]Verdict[/]")
    for line in verdict_text(held_root_cause(rr.causes), o, rr.results, rr.causes, rr.holds):
        print_para(line)
    if rr.rebuild.contradictions:
        print_contradictions(rr.rebuild.contradictions, limit=5)
    console.print("Assumptions:")
    for a in rr.assumptions:
        print_para(a)


def _print_fidelity(rr: ReplayResult) -> None:
    """The logged rounds re-run under ``prefix``, what differed, and the profile."""
    fid = rr.fidelity
    drops = fid.unexplained_drops or 0
    console.print(
        f"Fidelity under prefix: {fid.rounds_checked} logged rounds re-run, "
        f"{len(fid.mismatches)} mismatch(es)"
        + (f", {drops} unexplained baseline fall(s)" if drops else "")
        + (
            ""
            if rr.reproduced is None
            else f"; the out-of-memory is {'reproduced' if rr.reproduced else '[red]NOT reproduced[/]'}"
        )
    )
    if rr.profile is not None:
        print_para(release_line(rr.profile), indent=0, hang=2)
    for m in fid.mismatches[:10]:
        print_para(
            f"round {m.round} {m.rid}: {m.field} logged {m.logged} "
            f"model {m.model} ({m.where or ''})"
        )


def _policy_table(rr: ReplayResult) -> FitTable:
    t = FitTable(
        ["policy", "out of memory", "rounds", "unfinished"],
        title=f"Policies from round {rr.start_round}",
        right=(2,),
    )
    for name, res in rr.results.items():
        oom = res.oom
        unfinished = sorted(r for r, q in res.requests.items() if q.finished_round is None)
        t.add_row(
            name,
            f"round {oom.round} {oom.rid} {oom.tokens} tokens, {oom.available} available"
            if oom
            else "none",
            len(res.rounds),
            ", ".join(unfinished) or "-",
        )
    return t


def _print_stock(a: StockAnalysis, fmt: str) -> NoReturn:
    """A log without adder lines: what it tells, in JSON or words; then exit."""
    if fmt == "json":
        print_json(a.as_dict())
    else:
        print_log_summary(a.summary)
        head, *rest = stock_text(a)
        console.print(head, style="bold", highlight=False, markup=False)
        for line in rest:
            indent = len(line) - len(line.lstrip())
            print_para(line.strip(), indent=indent, hang=indent + 2)
    sys.exit(a.exit_code())
