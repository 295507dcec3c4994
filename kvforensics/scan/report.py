"""``scan --report DIR``: a markdown summary of the fleet and its figures."""

from __future__ import annotations

from pathlib import Path

from kvforensics.causes.oom import oom_words
from kvforensics.model.policies import FIX
from kvforensics.outputs import atomic_write_text
from kvforensics.replay.whole_log import GapAdmission, Refusal
from kvforensics.scan.fleet import Fleet
from kvforensics.scan.plots import plot_gaps, plot_margins, plot_refused
from kvforensics.scan.records import NodeOom, NodeScan

#: gap admissions listed per node in the markdown (all of them are in the Parquet/JSON)
LISTED = 20


def write_report(fleet: Fleet, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    figures = [
        plot_gaps(fleet, out / "gap-admissions.png"),
        plot_margins(fleet, out / "margins.png"),
        plot_refused(fleet, out / "refused.png"),
    ]
    md = out / "report.md"
    atomic_write_text(md, "\n".join(_markdown(fleet, [f.name for f in figures])) + "\n")
    return [md, *figures]


def _markdown(fleet: Fleet, figures: list[str]) -> list[str]:
    t = fleet.summary()
    lines = [
        "# Fleet scan",
        "",
        f"{t.scanned} of {t.nodes} node(s) scanned ({t.rounds} rounds, "
        f"{t.bytes / 1e6:.1f} MB of logs); {t.ooms} out of memory on "
        f"{t.nodes_with_oom} node(s); {t.gap_admissions} admission(s) through a gap on "
        f"{t.nodes_with_gap_admissions} node(s); {t.nodes_below_zero_margin} node(s) "
        "whose tightest margin is below zero.",
        "",
        "A gap admission: a request admitted after a truncation of the same round that left "
        "chunk budget, while the truncated request's tail was reserved by nobody. The margin "
        "of a round: what it left (available + evictable after its allocation) minus the "
        "tails promised to nobody; below zero those tails fit only if memory is freed in time.",
        "",
        "| node | rounds | out of memory (causes) | gap admissions | tightest margin | "
        "fixed refuses | mismatches | contradictions |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    lines += [_row(n) for n in fleet.nodes]
    lines.append("")
    for name in figures:
        lines += [f"![{name}]({name})", ""]
    unreadable = fleet.unreadable()
    if unreadable or any(n.error for n in fleet.nodes):
        lines += ["## Not read", ""]
        lines += [f"* `{p}`: {r}" for p, r in unreadable]
        lines += [f"* node `{n.node}`: {n.error}" for n in fleet.nodes if n.error]
        lines.append("")
    for n in fleet.nodes:
        lines += _node_section(n)
    return lines


def _refused(n: NodeScan) -> dict[str, tuple[Refusal, ...]]:
    """The fixes that refuse at least one request on the node, with their refusals."""
    refused = n.whole_log.refused if n.whole_log else {}
    return {p: rs for p, rs in refused.items() if rs}


def _gaps(n: NodeScan) -> tuple[GapAdmission, ...]:
    return n.whole_log.gap_admissions if n.whole_log else ()


def _oom_cell(o: NodeOom) -> str:
    return (
        (f"round {o.round} {o.rid}" if o.rid else f"{o.tokens} tokens")
        + (f" ({', '.join(c.id for c in o.causes)})" if o.causes else "")
        + (", not reproduced" if o.reproduced is False else "")
    )


def _row(n: NodeScan) -> str:
    if n.error:
        return f"| `{n.node}` | - | not scanned: {n.error} | - | - | - | - | - |"
    ooms = "; ".join(_oom_cell(o) for o in n.ooms)
    tight = n.whole_log.tightest() if n.whole_log else None
    refused = n.whole_log.refused if n.whole_log else {}
    fixed = len(refused[FIX]) if FIX in refused else "-"
    return (
        f"| `{n.node}` | {n.rounds} | {ooms or 'none'} | "
        f"{len(_gaps(n)) if n.logged_rounds else '-'} | "
        f"{tight.margin if tight else '-'}"
        f"{' (round ' + str(tight.round) + ')' if tight else ''} | {fixed} | "
        f"{n.mismatches} | {n.contradictions} |"
    )


def _node_section(n: NodeScan) -> list[str]:
    if n.error or not (_gaps(n) or n.ooms or _refused(n)):
        return []
    lines = [f"## `{n.node}`", ""]
    for o in n.ooms:
        where = f"in round {o.round}: {o.rid}, " if o.rid else f"at {o.where}: "
        lines.append(f"Out of memory {where}{oom_words(o.tokens, o.available)}.")
        lines += [f"* {c.id}: {c.summary}" for c in o.causes]
        lines.append("")
    gaps = _gaps(n)
    if gaps:
        lines += [
            f"{len(gaps)} gap admission(s)"
            + (f", the first {LISTED}:" if len(gaps) > LISTED else ":"),
            "",
            "| round | time | truncated | unreserved tail | admitted | computes | loads back |",
            "|---:|---|---|---:|---|---:|---:|",
        ]
        lines += [
            f"| {g.round} | {g.time or '-'} | {g.victim_rid} | {g.unreserved_tail} | "
            f"{g.intruder_rid} | {g.intruder_compute} | {g.intruder_load_back} |"
            for g in gaps[:LISTED]
        ]
        lines.append("")
    for policy, rs in _refused(n).items():
        lines.append(
            f"{policy} refuses {len(rs)} request(s): "
            + ", ".join(
                f"{x.rid} (round {x.round}, first token "
                + (f"+{x.delay_s:.2f} s)" if x.delay_s is not None else "not within the run)")
                for x in rs
            )
        )
    notes = [*n.notes, *(n.whole_log.notes if n.whole_log else ())]
    lines += ["", *[f"* {note}" for note in notes], ""]
    return lines
