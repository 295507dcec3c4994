"""`kvforensics rounds`: rebuild every scheduling round from logs, with provenance."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from rich.table import Table

from kvforensics.cli import app
from kvforensics.cli._common import console, print_json, print_log_summary
from kvforensics.logs import load_catalogue, read_events
from kvforensics.replay.stock import require_scheduler_log, unread_fork_lines
from kvforensics.rounds import cross_check, read_config, rebuild_rounds
from kvforensics.rounds.batches import batch_rounds

PageSize = Annotated[
    int | None, typer.Option("--page-size", help="Page size, if the log lacks startup lines.")
]
Align = Annotated[int | None, typer.Option("--align", help="Checkpoint end align size (0: none).")]
Chunk = Annotated[int | None, typer.Option("--chunk-size", help="chunked_prefill_size.")]
Pool = Annotated[int | None, typer.Option("--pool-size", help="max_total_num_tokens.")]
Formats = Annotated[
    list[Path] | None,
    typer.Option(
        "--formats", help="Extra format catalogue TOML for a fork's own lines (repeatable)."
    ),
]


def overrides(page_size, align, chunk_size, pool_size) -> dict:
    return {
        "page_size": page_size,
        "align_size": align,
        "chunked_prefill_size": chunk_size,
        "pool_size": pool_size,
    }


@app.command()
def rounds(
    logs: Annotated[list[Path], typer.Argument(help="Log files (any ranks; .gz is fine).")],
    fmt: Annotated[str, typer.Option("--format", help="table | json")] = "table",
    last: Annotated[int, typer.Option(help="Table: show only the last N rounds (0: all).")] = 12,
    page_size: PageSize = None,
    align: Align = None,
    chunk_size: Chunk = None,
    pool_size: Pool = None,
    rank: Annotated[
        str | None, typer.Option(help="The deciding rank (default: the one with adder lines).")
    ] = None,
    formats: Formats = None,
) -> None:
    """Rebuild the rounds: observed, derived and inferred pieces, baselines and decisions."""
    cat = load_catalogue(formats)
    events, summary = read_events(logs, extra_formats=formats, progress=True)
    if not events.filter(pl.col("kind") == "adder_check").height:
        require_scheduler_log(summary)
        unread_fork_lines(events, cat)
        _batch_level(events, summary, fmt, last, rank)
        return
    cfg, conf = read_config(events, overrides(page_size, align, chunk_size, pool_size))
    rb = rebuild_rounds(events, cfg, conf, rank=rank)
    cross_check(rb, events)
    if fmt == "json":
        print_json({"log": summary.to_dict(), **rb.as_dict()})
        return
    print_log_summary(summary)
    shown = rb.rounds[-last:] if last else rb.rounds
    t = Table(
        title=f"{len(rb.rounds)} rounds rebuilt from {rb.rank} ({len(logs)} file(s)); last {len(shown)}"
    )
    for c in ("round", "time", "pieces [start, end)", "provenance", "baseline", "after"):
        t.add_column(c)
    for r in shown:
        pieces = "\n".join(f"{p.rid} [{p.start}, {p.end}) {p.kind}" for p in r.pieces) or "-"
        prov = "\n".join(p.provenance + (" ✓" if p.cross_checked else "") for p in r.pieces) or "-"
        t.add_row(
            str(r.index),
            str(r.time or ""),
            pieces,
            prov,
            f"{r.baseline.value} ({r.baseline.provenance})" if r.baseline else "?",
            f"{r.baseline_end.value}" if r.baseline_end else ("OOM" if r.oom else "?"),
        )
    console.print(t)
    if rb.oom:
        console.print(
            f"[red]out of memory[/] in round {rb.oom.get('round')} ({rb.oom.get('rid')}): "
            f"Try to allocate {rb.oom['tokens']} tokens, {rb.oom['available']} available ({rb.oom['where']})"
        )
    console.print(f"{len(rb.contradictions)} contradiction(s)")
    for c in rb.contradictions[:10]:
        console.print(f"  round {c['round']}: {c['what']}: {c['detail']}")
    console.print("✓ = cross-checked against another rank's lines")


def _batch_level(events, summary, fmt: str, last: int, rank: str | None) -> None:
    """A log without adder lines: one batch-level round per Prefill batch line."""
    br = batch_rounds(events, rank)
    if fmt == "json":
        print_json({"log": summary.to_dict(), **br.as_dict()})
        return
    print_log_summary(summary)
    shown = br.rounds[-last:] if last else br.rounds
    who = f" of {br.rank}" if br.rank else ""
    t = Table(
        title=f"{len(br.rounds)} batch-level rounds{who} (one per Prefill batch line); "
        f"last {len(shown)}"
    )
    for c in (
        "round",
        "time",
        "line",
        "#new-seq",
        "#new-token",
        "#cached-token",
        "usage",
        "#queue-req",
    ):
        t.add_column(c)
    one_file = len(summary.files) == 1
    for r in shown:
        v = r.values
        usage = f"{v['token_usage']:.2f}" if v.get("token_usage") is not None else ""
        t.add_row(
            str(r.index),
            r.time or "",
            r.where.rsplit(":", 1)[1] if one_file else r.where,
            *(str(v.get(k, "")) for k in ("new_seq", "new_token", "cached_token")),
            usage,
            str(v.get("queue_req", "")),
        )
    console.print(t)
    if br.other_ranks:
        console.print(f"Other ranks with batch lines (use --rank): {', '.join(br.other_ranks)}")
    console.print(
        "Batch level only: the pieces of each request need PrefillAdder lines, which this "
        "log does not have."
    )
