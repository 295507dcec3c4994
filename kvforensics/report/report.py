"""The postmortem attachment: report.md, figures, and the ledgers behind every number.

The verdict and the provenance are passed in, not computed here: for a scenario they are
simply each policy's outcome and "the scenario file"; the log replay passes its own
root cause, fidelity and the log line behind each input number."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kvforensics.causes.oom import oom_words
from kvforensics.errors import InputError
from kvforensics.ledger_io import write_frame
from kvforensics.model import Config, RunResult
from kvforensics.model.profiles import Profile
from kvforensics.outputs import atomic_write_text, check_not_input
from kvforensics.progress import current
from kvforensics.report import _fmt, manifest
from kvforensics.report.diff import Diff, diff_ledgers
from kvforensics.report.explain import explain_round
from kvforensics.report.ledgers import frame_of, ledger_of, round_summaries
from kvforensics.report.terminal import MAX_WORD, shorten_values

#: a per-round table longer than this is cut to the rounds around the focus and the OOM
MAX_TABLE_ROUNDS = 120


def outcome_sentence(r: RunResult) -> str:
    if r.oom is not None:
        o = r.oom
        return (
            f"`{r.policy}`: out of memory in round {o.round}: "
            f"{oom_words(o.tokens, o.available, rid=o.rid)}."
        )
    left = sorted(rid for rid, q in r.requests.items() if q.finished_round is None)
    tail = f"; still unfinished: {', '.join(left)}" if left else "; every request finished"
    return f"`{r.policy}`: no out of memory in {len(r.rounds)} rounds{tail}."


def need_legend(sizing: tuple[Config, Profile] | None) -> str:
    """What the books' memory need adds up to under the profile the runs used (its
    ``max_new`` and ``check_page``, from the model)."""
    if sizing is None:
        return "memory need = what the adder's memory check asks for"
    cfg, profile = sizing
    max_new = profile.max_new(cfg)
    clipped = (
        f" (max_new_tokens {cfg.max_new_tokens} clipped to {max_new})"
        if max_new < cfg.max_new_tokens
        else ""
    )
    page = " + page" if profile.check_page(cfg) else f", no page ({profile.name}'s check counts none)"
    return f"memory need = remaining prompt (including host hits) + {max_new}{clipped}{page}"


def pick_focus(results: Mapping[str, RunResult]) -> int | None:
    """The round to explain: where a crashing policy first parts from one that does not
    crash (the decision that caused the crash), else the first divergence of the first
    two policies, else the OOM round, else the first round."""
    crashed = [p for p, r in results.items() if r.oom is not None]
    fine = [p for p, r in results.items() if r.oom is None]
    pair = (crashed[0], fine[0]) if crashed and fine else tuple(list(results)[:2])
    if len(pair) == 2:
        d = _diff(results, *pair)
        div = d.first_divergence or d.first_accounting_divergence
        if div is not None:
            return div.round
    first_oom = results[crashed[0]].oom if crashed else None
    if first_oom is not None:
        return first_oom.round
    firsts = [r.rounds[0].round for r in results.values() if r.rounds]
    return min(firsts) if firsts else None


def _diff(results: Mapping[str, RunResult], a: str, b: str) -> Diff:
    return diff_ledgers(frame_of(results[a]), frame_of(results[b]), a, b)


def _outcome_table(results: Mapping[str, RunResult]) -> str:
    rows = []
    for p, r in results.items():
        summaries = round_summaries(ledger_of(r))
        peak = max((s.unallocated_tail for s in summaries), default=0)
        o = r.oom
        left = sorted(rid for rid, q in r.requests.items() if q.finished_round is None)
        rows.append(
            [
                p,
                len(summaries),
                "yes" if o else "no",
                o.round if o else "-",
                o.rid if o else "-",
                o.tokens if o else "-",
                o.available if o else "-",
                peak,
                ", ".join(left) or "-",
            ]
        )
    headers = [
        "policy",
        "rounds",
        "out of memory",
        "OOM round",
        "request",
        "tried to allocate",
        "available",
        "peak promised-but-unallocated",
        "unfinished",
    ]
    return _fmt.md_table(headers, rows, right=(1, 3, 5, 6, 7))


def _round_table(r: RunResult, focus: int | None) -> str:
    summaries = round_summaries(ledger_of(r))
    times = {rec.round: rec.time for rec in r.rounds}
    keep = summaries
    note = ""
    if len(summaries) > MAX_TABLE_ROUNDS:
        anchors = [x for x in (focus, r.oom.round if r.oom else None) if x is not None]
        near = {n for a in anchors for n in range(a - 10, a + 11)}
        keep = [s for s in summaries if s.round in near] or summaries[:MAX_TABLE_ROUNDS]
        note = f"\n\n({len(summaries) - len(keep)} rounds left out; all are in the ledger files.)"
    rows = []
    for s in keep:
        dec = _fmt.decisions(s.decisions)
        if s.oom:
            dec += f"; OUT OF MEMORY {oom_words(s.oom.tokens, s.oom.available, form='allocating')}"
        rows.append(
            [
                s.round,
                f"{times[s.round]:.2f}" if s.round in times else "-",
                _fmt.pieces(s.pieces),
                dec,
                s.baseline_after,
                s.unallocated_tail,
            ]
        )
    headers = [
        "round",
        "time s",
        "pieces [start, end) len",
        "decisions",
        "baseline after",
        "unallocated tail",
    ]
    return _fmt.md_table(headers, rows, right=(0, 1, 4, 5)) + note


def _pair(results: Mapping[str, RunResult]) -> list[str]:
    """The two policies the focus round is told under: one that crashes and one that does
    not when there are both, else the first two."""
    crashed = [p for p, r in results.items() if r.oom is not None]
    fine = [p for p, r in results.items() if r.oom is None]
    return [crashed[0], fine[0]] if crashed and fine else list(results)[:2]


def write_report(
    out_dir: str | Path,
    results: Mapping[str, RunResult],
    *,
    title: str,
    story: list[str] | None = None,
    evidence: list[str] | None = None,
    events: pl.DataFrame | None = None,
    focus_round: int | None = None,
    inputs: Iterable[str | Path] = (),
    force: bool = False,
    history: Sequence[tuple[int, int]] = (),
    log_notes: Sequence[str] | None = None,
    sizing: tuple[Config, Profile] | None = None,
    reproducer: tuple[Sequence[str], Mapping[str, str]] | None = None,
) -> list[Path]:
    """Write the attachment into `out_dir`; returns the files written (report.md first).

    ``story`` (markdown lines) tells what happened and what a fix costs, ``evidence``
    backs it; without them the report says each policy's outcome. `inputs` are the files
    the results came from: nothing is written over them. A non-empty `out_dir` is refused
    unless ``force``, which replaces only an earlier report's files. ``history`` is the
    pool use logged before the first round, drawn as context. ``log_notes``: what the
    reader could not read in the logs (cut files, unreadable lines), in a section.
    ``sizing``: the configuration and model profile the runs used (what the books' legend
    says the memory need counts). ``reproducer``: its section of report.md and its files
    (name -> text), when ``kvforensics reproduce`` made one."""
    if not results:
        raise InputError("nothing to report: no policy results")
    out = Path(out_dir)
    given = [Path(p) for p in inputs]
    focus = focus_round if focus_round is not None else pick_focus(results)
    all_rounds = {s.round for r in results.values() for s in round_summaries(ledger_of(r))}
    if focus is not None and focus not in all_rounds:
        span = f"rounds {min(all_rounds)}..{max(all_rounds)}" if all_rounds else "no rounds"
        raise InputError(f"round {focus} is not in the results ({span})")
    repro_files = reproducer[1] if reproducer else {}
    paths = _paths(out, focus, events is not None, list(repro_files))
    for p in paths.every():
        check_not_input(p, given)
    stale = manifest.claim(out, [p.name for p in paths.every()], force)

    # NOTE: matplotlib is most of a command's start-up: only a report imports it
    from kvforensics.report.figures import plot_pool, plot_waterfall

    written: list[Path] = []
    files = current().stage("writing report", len(paths.every()), "files")
    plot_pool(results, paths.pool, focus=focus, history=list(history))
    written.append(paths.pool)
    files.advance()
    if focus is not None and paths.waterfall is not None:
        plot_waterfall({p: results[p] for p in _pair(results)}, focus, paths.waterfall)
        written.append(paths.waterfall)
        files.advance()
    ledger = pl.concat([frame_of(r) for r in results.values()], how="vertical_relaxed")
    frames = [(paths.ledger_parquet, ledger), (paths.ledger_csv, ledger)]
    if events is not None and paths.events is not None:
        frames += [(paths.events[0], events), (paths.events[1], events)]
    for path, frame in frames:
        write_frame(frame, path)
        written.append(path)
        files.advance()
    for p in paths.reproducer:
        atomic_write_text(p, repro_files[p.name])
        written.append(p)
        files.advance()

    names = [p.name for p in written] + [manifest.MANIFEST]
    md = _markdown(results, title, story, evidence, focus, names, log_notes, need_legend(sizing),
                   list(reproducer[0]) if reproducer else [])  # fmt: skip
    md = _shortened(md, names, _rids(results, events))
    atomic_write_text(paths.md, md)
    files.advance()
    files.done()
    manifest.record(out, ["report.md", *names], stale)
    return [paths.md, *written]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportFiles:
    """Where each file of the attachment goes."""

    md: Path
    pool: Path
    ledger_parquet: Path
    ledger_csv: Path
    waterfall: Path | None = None
    events: tuple[Path, Path] | None = None  # Parquet, CSV
    reproducer: tuple[Path, ...] = ()

    def every(self) -> list[Path]:
        """All of them, in the order the manifest lists them."""
        out = [self.md, self.pool, self.ledger_parquet, self.ledger_csv]
        out += [self.waterfall] if self.waterfall is not None else []
        out += list(self.events or ())
        return [*out, *self.reproducer]


def _paths(out: Path, focus: int | None, with_events: bool, repro: list[str]) -> ReportFiles:
    return ReportFiles(
        md=out / "report.md",
        pool=out / "pool.png",
        ledger_parquet=out / "ledger.parquet",
        ledger_csv=out / "ledger.csv",
        waterfall=out / f"waterfall-round-{focus}.png" if focus is not None else None,
        events=(out / "events.parquet", out / "events.csv") if with_events else None,
        reproducer=tuple(out / n for n in repro),
    )


def _log_notes_md(notes: Sequence[str]) -> list[str]:
    """The reader's notes, right after the story: a cut log can hide the evidence."""
    lines = ["## What the logs could not tell", ""]
    lines += [f"- {n.strip()}" for n in notes] or [
        "- nothing: every file read to its end, every line understood"
    ]
    return [*lines, ""]


def _markdown(
    results: Mapping[str, RunResult], title: str, story: list[str] | None,
    evidence: list[str] | None, focus: int | None, files: list[str],
    log_notes: Sequence[str] | None, legend: str, repro: list[str],
) -> str:  # fmt: skip
    out = [f"# {title}", ""]
    if story:
        out += story
    else:
        out += ["## Outcome", ""] + [f"- {outcome_sentence(r)}" for r in results.values()]
        out += ["", _outcome_table(results), ""]
    if log_notes is not None:
        out += _log_notes_md(log_notes)
    out += _figures(focus)
    if evidence:
        out += evidence
    names = list(results)
    if len(names) >= 2:
        out += ["### Where the policies part", ""]
        for other in names[1:]:
            d = _diff(results, names[0], other)
            out += [f"- `{names[0]}` vs `{other}`: " + ". ".join(d.headline())]
        out.append("")
    if focus is not None:
        pair = _pair(results)
        out += [f"### Round {focus}'s books under {' and '.join(f'`{p}`' for p in pair)}", ""]
        out.append(
            f"Columns: {legend}; "
            "offsets shown before → after the step; chunk budget before → after."
        )
        sub = {p: results[p] for p in pair}
        out += ["", explain_round(sub, focus).to_markdown(heading="####", title=False)]
    out += ["### Per-round table", ""]
    for p, r in results.items():
        out += [f"#### `{p}`", "", _round_table(r, focus), ""]
    if not evidence:
        out += ["### Where each number came from", ""]
        out += [
            "- requests, pool, configuration and timing: the scenario file",
            "- decisions, pieces, offsets, budgets, allocations and any out of memory: "
            "re-run of the admission model under each policy (in `ledger.parquet` / `ledger.csv`)",
            "",
        ]
    out += repro
    out += ["## Files", ""] + [f"- `{f}`" for f in ["report.md", *files]]
    return "\n".join(out) + "\n"


def _rids(results: Mapping[str, RunResult], events: pl.DataFrame | None) -> set[str]:
    rids = {rid for r in results.values() for rid in r.requests}
    if events is not None and "rid" in events.columns:
        rids.update(events["rid"].drop_nulls().unique().to_list())
    return rids


def _shortened(md: str, files: Sequence[str], rids: Iterable[str]) -> str:
    """Values too long to read (a 100,000-character rid) cut to their head and tail as
    the terminal's tables cut them; the data files beside report.md hold them whole."""
    short = shorten_values(md, rids)
    if short == md:
        return md
    whole = [f"`{f}`" for f in files if f.endswith(".csv") or f.endswith(".parquet")]
    return short + (
        f"\nValues over {MAX_WORD} characters (such as a long request id) are shortened in "
        "this file to their head and tail, never inside a number, with how much was left "
        f"out; {', '.join(whole) or 'the ledgers'} hold them whole.\n"
    )


def _figures(focus: int | None) -> list[str]:
    out = [
        "## Figures",
        "",
        "![KV pool use per round](pool.png)",
        "",
        "KV slots in use after each round, the load-back of each round as its own layer, "
        "and the promised-but-unallocated tail of a chunked request on top; the dashed line "
        "is the pool size.",
        "",
    ]
    if focus is not None:
        out += [
            f"![Round {focus}'s memory book](waterfall-round-{focus}.png)",
            "",
            f"Round {focus}'s memory book step by step: the baseline minus each step's lock, "
            "load-back and offset charge; the last few thousand tokens are drawn on their "
            "own scale.",
            "",
        ]
    return out
