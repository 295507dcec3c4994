"""``scan --report DIR``: a markdown summary of the fleet and its figures."""

from __future__ import annotations

from pathlib import Path

from kvforensics.outputs import atomic_write_text
from kvforensics.scan.fleet import Fleet
from kvforensics.scan.plots import plot_gaps, plot_margins, plot_refused

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
    t = fleet.totals()
    lines = [
        "# Fleet scan",
        "",
        f"{t['scanned']} of {t['nodes']} node(s) scanned ({t['rounds']} rounds, "
        f"{t['bytes'] / 1e6:.1f} MB of logs); {t['ooms']} out of memory on "
        f"{t['nodes_with_oom']} node(s); {t['gap_admissions']} admission(s) through a gap on "
        f"{t['nodes_with_gap_admissions']} node(s); {t['nodes_below_zero_margin']} node(s) "
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
    lines += [_row(n.as_dict()) for n in fleet.nodes]
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
        lines += _node_section(n.as_dict())
    return lines


def _row(d: dict) -> str:
    if d["error"]:
        return f"| `{d['node']}` | - | not scanned: {d['error']} | - | - | - | - | - |"
    ooms = "; ".join(
        (f"round {o['round']} {o['rid']}" if o["rid"] else f"{o['tokens']} tokens")
        + (f" ({', '.join(c['id'] for c in o['causes'])})" if o["causes"] else "")
        + (", not reproduced" if o["reproduced"] is False else "")
        for o in d["ooms"]
    )
    tight = d["tightest_margin"]
    fixed = d["refused"].get("fixed", {"requests": "-"})
    return (
        f"| `{d['node']}` | {d['rounds']} | {ooms or 'none'} | "
        f"{len(d['gap_admissions']) if d['logged_rounds'] else '-'} | "
        f"{tight['margin'] if tight else '-'}"
        f"{' (round ' + str(tight['round']) + ')' if tight else ''} | {fixed['requests']} | "
        f"{d['fidelity']['mismatches']} | {d['contradictions']} |"
    )


def _node_section(d: dict) -> list[str]:
    if d["error"] or not (d["gap_admissions"] or d["ooms"] or _refused(d)):
        return []
    lines = [f"## `{d['node']}`", ""]
    for o in d["ooms"]:
        where = f"in round {o['round']}: {o['rid']}, " if o["rid"] else f"at {o.get('where')}: "
        lines.append(f"Out of memory {where}{o['tokens']} tokens, {o['available']} available.")
        lines += [f"* {c['id']}: {c['summary']}" for c in o["causes"]]
        lines.append("")
    gaps = d["gap_admissions"]
    if gaps:
        lines += [
            f"{len(gaps)} gap admission(s)"
            + (f", the first {LISTED}:" if len(gaps) > LISTED else ":"),
            "",
            "| round | time | truncated | unreserved tail | admitted | computes | loads back |",
            "|---:|---|---|---:|---|---:|---:|",
        ]
        lines += [
            f"| {g['round']} | {g['time'] or '-'} | {g['victim_rid']} | {g['unreserved_tail']} | "
            f"{g['intruder_rid']} | {g['intruder_compute']} | {g['intruder_load_back']} |"
            for g in gaps[:LISTED]
        ]
        lines.append("")
    for policy, rs in _refused(d).items():
        lines.append(
            f"{policy} refuses {rs['requests']} request(s): "
            + ", ".join(
                f"{x['rid']} (round {x['round']}, first token "
                + (f"+{x['delay_s']:.2f} s)" if x["delay_s"] is not None else "not within the run)")
                for x in rs["delays"]
            )
        )
    lines += ["", *[f"* {note}" for note in d["notes"]], ""]
    return lines


def _refused(d: dict) -> dict:
    return {p: r for p, r in d["refused"].items() if r["requests"]}
