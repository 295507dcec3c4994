"""`kvforensics rounds`: rebuild every scheduling round from logs, with provenance.

Exit codes: 0 the rounds were rebuilt; 2 bad input, including logs whose deciding rank
printed no PrefillAdder line (a PP1 log alone: give PP0's); 3 the evidence contradicts
itself (listed)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from rich.markup import escape

from kvforensics.cli._app import app
from kvforensics.cli._common import console, print_contradictions, print_json, print_log_summary
from kvforensics.cli._inputs import (
    Align,
    Chunk,
    Formats,
    LogOptions,
    NoProgress,
    PageSize,
    Pool,
    Rank,
    Since,
    Until,
    check_format,
)
from kvforensics.errors import InputError
from kvforensics.logs import load_catalogue
from kvforensics.logs.summary import ParseSummary
from kvforensics.model.profiles import FORK
from kvforensics.outputs import atomic_write, check_output
from kvforensics.progress import current
from kvforensics.replay import EXIT_MISMATCH
from kvforensics.replay.ranges import Joined, RangeOptions, check_engine, rangeable, run_ranges
from kvforensics.replay.stock import fork_lines, require_scheduler_log
from kvforensics.report.terminal import FitTable, literal
from kvforensics.rounds import from_logs
from kvforensics.rounds.batches import batch_rounds
from kvforensics.rounds.ranks import deciding_rank, describe_rank
from kvforensics.rounds.rebuild import Rebuild
from kvforensics.rounds.source import LogRounds
from kvforensics.rounds.stream import LogStream, Narrow, forgetting, narrow_rounds
from kvforensics.rounds.writers import SUFFIXES, write_rounds


@app.command()
def rounds(
    logs: Annotated[list[Path], typer.Argument(help="Log files (any ranks; .gz is fine).")],
    fmt: Annotated[str, typer.Option("--format", help="table | json")] = "table",
    last: Annotated[int, typer.Option(help="Table: show only the last N rounds (0: all).")] = 12,
    page_size: PageSize = None,
    align: Align = None,
    chunk_size: Chunk = None,
    pool_size: Pool = None,
    rank: Rank = None,
    formats: Formats = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            help="Write every round to FILE (.ndjson or .parquet) as it is rebuilt.",
        ),
    ] = None,
    since: Since = None,
    until: Until = None,
    jobs: Annotated[
        int,
        typer.Option(
            min=1,
            max=256,
            help="With -o: split one plain log into N byte ranges, rebuilt by N workers "
            "and written in order (the same file as 1).",
        ),
    ] = 1,
    engine: Annotated[
        str, typer.Option(help="Where --jobs' workers run: local (processes) | ray.")
    ] = "local",
    no_progress: NoProgress = False,
) -> None:
    """Rebuild the rounds: observed, derived and inferred pieces, baselines and decisions."""
    check_format(fmt, ("table", "json"))
    check_engine(engine)
    opts = LogOptions(
        page_size, align, chunk_size, pool_size, rank, formats, None, since, until, no_progress
    )
    narrow = opts.narrow()
    if output is not None:
        _write(logs, output, opts, narrow, jobs, engine)
        return

    def read(hold: bool) -> LogRounds:
        return from_logs(
            logs, overrides=opts.overrides(), rank=opts.rank, formats=formats, hold=hold,
            narrow=narrow,
        )  # fmt: skip

    with opts.stages():
        got = read(True)
        release = got.rebuild is None and not fork_lines(got.events, load_catalogue(formats))
        if got.rebuild is None and not release:
            got = read(False)  # the fork's lines without an adder line
    if release:
        require_scheduler_log(got.summary)
        if opts.rank is not None:  # a rank no line carries: say which ranks there are
            deciding_rank(got.events, opts.rank)
        _batch_level(got.events, got.summary, fmt, last, opts.rank)
        return
    _show(got, fmt, last)


def _show(got: LogRounds, fmt: str, last: int) -> None:
    """The rebuilt rounds, as a table or JSON; exits with the contradictions' code."""
    events, summary, rb = got.events, got.summary, got.rebuild
    assert rb is not None  # a read that does not hold back always rebuilds
    adder = events.filter(pl.col("kind") == "adder_check")["rank"]
    if not rb.rounds and rb.rank not in set(adder.to_list()):
        raise _silent_rank(describe_rank(events, rb.rank), bool(adder.len()), summary.unreadable)
    if fmt == "json":
        print_json({"log": summary.to_dict(), **rb.as_dict()})
        raise typer.Exit(EXIT_MISMATCH if rb.contradictions else 0)
    print_log_summary(summary)
    source = describe_rank(events, rb.rank)
    if rb.rounds:
        console.print(_table(rb, source, last), highlight=False)
    else:
        console.print(f"0 rounds rebuilt from {source}", markup=False)
    if rb.oom:
        console.print(
            f"[red]out of memory[/] in round {rb.oom.round} ({literal(rb.oom.rid)}): "
            f"Try to allocate {rb.oom.tokens} tokens, {rb.oom.available} available "
            f"({escape(str(rb.oom.where))})"
        )
    print_contradictions(rb.contradictions, limit=10)
    console.print("✓ = cross-checked against another rank's lines")
    raise typer.Exit(EXIT_MISMATCH if rb.contradictions else 0)


def _table(rb: Rebuild, source: str, last: int) -> FitTable:
    shown = rb.rounds[-last:] if last else rb.rounds
    days = sorted({str(r.time.date()) for r in shown if r.time is not None})
    t = FitTable(
        ["round", "time", "pieces [start, end)", "provenance", "baseline", "after"],
        title=f"{len(rb.rounds)} rounds rebuilt from {source}"
        + (f"; the last {len(shown)}" if len(shown) < len(rb.rounds) else "")
        + (f" (times on {days[0]})" if len(days) == 1 else ""),
        key=2,
        right=(0,),
    )
    for r in shown:
        pieces = "\n".join(f"{p.rid} [{p.start}, {p.end}) {p.kind}" for p in r.pieces) or "-"
        prov = "\n".join(p.provenance + (" ✓" if p.cross_checked else "") for p in r.pieces) or "-"
        when = "" if r.time is None else (str(r.time.time()) if len(days) == 1 else str(r.time))
        t.add_row(
            r.index,
            when,
            pieces,
            prov,
            f"{r.baseline.value} ({r.baseline.provenance})" if r.baseline else "?",
            f"{r.baseline_end.value}" if r.baseline_end else ("OOM" if r.oom else "?"),
        )
    return t


def _write(
    logs: list[Path], output: Path, opts: LogOptions, narrow: Narrow, jobs: int = 1,
    engine: str = "local",
) -> None:  # fmt: skip
    """Stream the rounds into ``output``; say how many, the out-of-memory, contradictions.
    ``jobs`` > 1 on one plain log: rebuilt over byte ranges (``replay.ranges``)."""
    if output.suffix not in SUFFIXES:
        raise InputError(f"{output}: give a file ending in {' or '.join(SUFFIXES)}")
    check_output(output, logs)
    ls = LogStream(list(logs), opts.overrides(), opts.rank, opts.formats)
    count: list[int] = []

    def write(tmp: Path) -> None:
        nonlocal ls
        joined = _ranged(logs, opts, narrow, jobs, engine)
        if joined is not None:
            ls = joined.stream
            rounds = current().counted(
                (r for r, _ in joined.rounds()), "rebuilding rounds", "rounds"
            )
            try:
                count.append(write_rounds(rounds, tmp))
            finally:
                joined.close()
        else:
            rounds = current().counted(ls, "rebuilding rounds", "rounds")
            count.append(write_rounds(narrow_rounds(forgetting(ls, rounds), narrow), tmp))
        if ls.rebuilder is None or not ls.rebuilder.count:  # nothing to write: no file
            files = [f.path for f in ls.summary.files if ls.rank in f.ranks or not ls.rank]
            who = f"{ls.rank} ({', '.join(files)})" if ls.rank else ", ".join(files)
            others = ls.summary.adder_lines
            raise _silent_rank(who, others, ls.summary.unreadable)

    with opts.stages():
        atomic_write(output, write)
    print_log_summary(ls.summary)
    console.print(f"{count[0]} rounds written to {output}", markup=False)
    oom = ls.rebuilder.oom if ls.rebuilder else None
    if oom:
        console.print(
            f"[red]out of memory[/] in round {oom.round} ({literal(oom.rid)}): "
            f"Try to allocate {oom.tokens} tokens, {oom.available} available "
            f"({escape(str(oom.where))})"
        )
    found = ls.rebuilder.contradictions if ls.rebuilder else []
    print_contradictions(found, limit=10)
    raise typer.Exit(EXIT_MISMATCH if found else 0)


def _ranged(logs: list[Path], opts: LogOptions, narrow: Narrow, jobs: int, engine: str) -> Joined | None:
    """The rounds of one plain log rebuilt over ``jobs`` byte ranges; None where the one
    pass must be made (several files, gzip, ``--since``/``--until``, what the join refuses)."""
    if not rangeable(logs, jobs) or narrow:
        return None
    got = RangeOptions(
        opts.overrides(), opts.rank, opts.formats, FORK, whole=False, rerun=False, window=None
    )
    try:
        return run_ranges(Path(logs[0]), jobs, got, engine=engine)
    except Exception:  # NotRanged, or anything the join did not foresee: the one pass
        return None


def _silent_rank(who: str, others: bool, unreadable: int) -> InputError:
    """The deciding rank printed no adder line, so no round comes from it (a PP1 log
    alone, or ``--rank`` naming a rank that only replays plans)."""
    fix = (
        "the adder lines here are another rank's: leave --rank out or name that rank"
        if others
        else "give the deciding rank's log (PP0) of a build that prints them"
    )
    why = (
        f" ({unreadable} line(s) hold numbers a log cannot mean and were not used)"
        if unreadable
        else ""
    )
    return InputError(
        f"{who} has no PrefillAdder lines{why}, so no round can be rebuilt from it; {fix}"
    )


def _batch_level(
    events: pl.DataFrame, summary: ParseSummary, fmt: str, last: int, rank: str | None
) -> None:
    """A log without adder lines: one batch-level round per Prefill batch line."""
    br = batch_rounds(events, rank)
    if fmt == "json":
        print_json({"log": summary.to_dict(), **br.as_dict()})
        return
    print_log_summary(summary)
    shown = br.rounds[-last:] if last else br.rounds
    who = f" of {br.rank}" if br.rank else ""
    t = FitTable(
        ["round", "time", "line", "#new-seq", "#new-token", "#cached-token", "usage", "#queue-req"],
        title=f"{len(br.rounds)} batch-level rounds{who}, one per Prefill batch line"
        + (f"; the last {len(shown)}" if len(shown) < len(br.rounds) else ""),
        right=(0, 3, 4, 5, 6, 7),
    )
    one_file = len(summary.files) == 1
    for r in shown:
        v = r.values
        usage = f"{v.token_usage:.2f}" if v.token_usage is not None else ""
        t.add_row(
            r.index,
            r.time or "",
            r.where.rsplit(":", 1)[1] if one_file else r.where,
            *("" if n is None else n for n in (v.new_seq, v.new_token, v.cached_token)),
            usage,
            "" if v.queue_req is None else v.queue_req,
        )
    console.print(t, highlight=False)
    if br.other_ranks:
        console.print(f"Other ranks with batch lines (--rank): {literal(', '.join(br.other_ranks))}")
    console.print(
        "Batch level only: the pieces of each request need PrefillAdder lines, which this "
        "log does not have."
    )
