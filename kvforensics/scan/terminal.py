"""The fleet as a rich table, a line per unreadable file, and the totals."""

from __future__ import annotations

from rich.console import Console, JustifyMethod
from rich.table import Table

from kvforensics.model.policies import FIX
from kvforensics.replay.whole_log import WholeLog
from kvforensics.scan.discover import short_names
from kvforensics.scan.fleet import Fleet
from kvforensics.scan.records import NodeScan


def print_fleet(fleet: Fleet, console: Console) -> None:
    base, names = short_names([n.node for n in fleet.nodes])
    t = Table(title=f"Fleet scan of {base or '.'}", title_justify="left", show_lines=True)
    columns: tuple[tuple[str, JustifyMethod, int | None], ...] = (
        ("node", "left", None),
        ("rounds", "right", None),
        ("out of memory", "left", 19),  # a rid and a cause id whole
        ("gap\nadm.", "right", None),
        ("tightest\nmargin", "right", None),
        ("fixed\nrefuses", "right", None),
    )
    for col, just, width in columns:
        t.add_column(col, justify=just, overflow="fold", min_width=width)
    for n in fleet.nodes:
        t.add_row(*_cells(n, names[n.node]))
    console.print(t)
    for path, reason in fleet.unreadable():
        console.print(f"[yellow]unreadable[/]: {path}: {reason}", highlight=False)
    for n in fleet.nodes:
        if n.error:
            console.print(f"[red]not scanned[/]: {n.node}: {n.error}", highlight=False)
        wl_notes = n.whole_log.notes if n.whole_log is not None else ()
        for note in (*n.notes, *wl_notes):  # what the reader could not read, and why not
            console.print(
                f"note: {names[n.node]}: {note.strip()}", highlight=False, markup=False, soft_wrap=True
            )
    tot = fleet.summary()
    console.print(
        f"{tot.scanned} of {tot.nodes} node(s) scanned, {tot.rounds} rounds "
        f"({tot.fidelity_rounds} logged ones re-run, {tot.mismatches} mismatch(es)), "
        f"{tot.bytes / 1e6:.1f} MB; {tot.ooms} out of memory; "
        f"{tot.gap_admissions} gap admission(s) on {tot.nodes_with_gap_admissions} node(s); "
        f"{tot.nodes_below_zero_margin} node(s) with a negative margin"
        + "".join(f"; {p} refuses {k}" for p, k in tot.refused.items())
        + (f"; {tot.contradictions} contradiction(s)" if tot.contradictions else ""),
        highlight=False,
    )


def _cells(n: NodeScan, short: str) -> list[str]:
    name = f"{short}\n{len(n.files)} file{'s' if len(n.files) != 1 else ''}"
    if n.error:
        return [name, "-", "[red]not scanned[/]", "-", "-", "-"]
    ooms = "\n".join(
        (f"round {o.round}\n{o.rid}" if o.rid else f"{o.tokens} tokens")
        + "".join(f"\n{c.id}" for c in o.causes)
        + ("\n[red]not reproduced[/]" if o.reproduced is False else "")
        for o in n.ooms
    )
    wl = n.whole_log
    tight = wl.tightest() if wl is not None else None
    margin = f"{tight.margin}\nat {tight.round}" if tight else "-"
    fixed = wl.refused.get(FIX) if wl is not None else None
    refuses = "-"
    if fixed:
        delays = [x.delay_s for x in fixed if x.delay_s is not None]
        refuses = f"{len(fixed)}" + (f"\n+{max(delays):.2f} s" if delays else "")
    if n.mismatches:
        name += f"\n[red]{n.mismatches} mismatch(es)[/]"
    if n.contradictions:
        name += f"\n[yellow]{n.contradictions} contradiction(s)[/]"
    gaps = str(len(wl.gap_admissions)) if wl is not None else "-"  # a release log tells none
    return [name, str(n.rounds), ooms or "none", gaps, margin, refuses]


def whole_log_line(wl: WholeLog) -> str:
    """One line for ``replay``: admissions through a gap and the tightest margin."""
    tight = wl.tightest()
    where = f" after round {tight.round}" if tight else ""
    margin = f"tightest margin {tight.margin}{where}" if tight else "no round to measure a margin"
    victims = len({(g.round, g.victim_rid) for g in wl.gap_admissions})
    gaps = (
        f"{len(wl.gap_admissions)} admission(s) through a gap "
        f"({victims} truncation(s) with the tail unreserved)"
        if wl.gap_admissions
        else "no admission through a gap"
    )
    return f"Whole log: {gaps}; {margin} (left minus unreserved tails)."
