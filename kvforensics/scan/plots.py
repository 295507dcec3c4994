"""The fleet report's figures (matplotlib's object API on the Agg canvas, with the
palette and canvas of ``kvforensics.plotting`` the report's figures use too): gap
admissions over time per node, margins per node, and what the fixes would have refused."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from kvforensics.plotting import COLORS, TOKENS
from kvforensics.plotting import save_png as _save
from kvforensics.replay.whole_log import GapAdmission, WholeLog
from kvforensics.scan.discover import short_names
from kvforensics.scan.fleet import Fleet
from kvforensics.scan.records import NodeScan

#: nodes drawn at most per figure (the ones with the most to show)
MAX_NODES = 30
SERIES = 8


def _names(fleet: Fleet) -> dict[str, str]:
    return short_names([n.node for n in fleet.nodes])[1]


def _empty(fig: Figure, ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()


def _when(g: GapAdmission) -> datetime | int:
    return datetime.fromisoformat(g.time) if g.time else g.round


def _scanned(fleet: Fleet) -> list[tuple[NodeScan, WholeLog]]:
    """The nodes with whole-log findings, each with them."""
    return [(n, n.whole_log) for n in fleet.nodes if n.whole_log is not None]


def plot_gaps(fleet: Fleet, path: Path) -> Path:
    names = _names(fleet)
    nodes = [(n, wl) for n, wl in _scanned(fleet) if wl.gap_admissions]
    nodes = sorted(nodes, key=lambda x: -len(x[1].gap_admissions))[:MAX_NODES]
    fig = Figure(figsize=(9, 1.2 + 0.45 * max(1, len(nodes))))
    ax = fig.subplots()
    if not nodes:
        _empty(fig, ax, "no admission through a gap on any node")
        return _save(fig, path)
    timed = all(g.time for _, wl in nodes for g in wl.gap_admissions)
    top = max(g.intruder_load_back for _, wl in nodes for g in wl.gap_admissions) or 1
    for y, (_, wl) in enumerate(reversed(nodes)):
        gaps = wl.gap_admissions
        xs: list[Any] = [_when(g) if timed else g.round for g in gaps]
        sizes = [12 + 140 * g.intruder_load_back / top for g in gaps]
        ax.scatter(
            xs,
            [y] * len(gaps),
            s=sizes,
            color=COLORS.tail,
            alpha=0.6,
            edgecolors="black",
            linewidths=0.4,
        )
        ax.annotate(
            f"{len(gaps)}",
            (1.0, y),
            xycoords=("axes fraction", "data"),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
        )
    ax.set_yticks(range(len(nodes)), [names[n.node] for n, _ in reversed(nodes)])
    ax.set_ylim(-0.7, len(nodes) - 0.3)
    ax.set_xlabel("log time" if timed else "round")
    ax.set_title("Admissions through a gap (marker area: tokens loaded back; count at right)")
    ax.grid(axis="x", alpha=0.3)
    if timed:
        fig.autofmt_xdate()
    return _save(fig, path)


def plot_margins(fleet: Fleet, path: Path) -> Path:
    names = _names(fleet)
    tight = [(n, wl, m) for n, wl in _scanned(fleet) if (m := wl.tightest()) is not None]
    nodes = sorted(tight, key=lambda x: x[2].margin)[:MAX_NODES]
    fig = Figure(figsize=(9, 3.2 + 0.35 * max(1, len(nodes))))
    bars, lines = fig.subplots(2, 1, height_ratios=[max(1, len(nodes)) * 0.35 + 0.6, 2.6])
    if not nodes:
        _empty(fig, bars, "no round to measure a margin")
        lines.set_axis_off()
        return _save(fig, path)
    values = [m.margin for _, _, m in nodes]
    colors = [COLORS.oom if v < 0 else COLORS.ok for v in values]
    ys = range(len(nodes))
    bars.barh(list(ys), values, color=colors)
    bars.set_yticks(list(ys), [f"{names[n.node]} (round {m.round})" for n, _, m in nodes])
    bars.invert_yaxis()
    bars.axvline(0, color="black", linewidth=0.8)
    bars.xaxis.set_major_formatter(TOKENS)
    bars.set_title("Tightest margin per node: left after a round minus tails reserved by nobody")
    for n, wl, _ in nodes[:SERIES]:
        ms = wl.margins
        lines.step(
            [m.round for m in ms],
            [m.margin for m in ms],
            where="mid",
            label=names[n.node],
            linewidth=1,
            marker="o" if len(ms) < 20 else None,  # a short log is a few points
            markersize=3,
        )
    lines.axhline(0, color="black", linewidth=0.8)
    lines.yaxis.set_major_formatter(TOKENS)
    lines.set_xlabel("round (lowest margin of each stretch of rounds)")
    lines.set_ylabel("margin (tokens)")
    lines.legend(fontsize=7, loc="best")
    lines.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def plot_refused(fleet: Fleet, path: Path) -> Path:
    names = _names(fleet)
    scanned = _scanned(fleet)
    policies = sorted({p for _, wl in scanned for p in wl.refused})
    nodes = [(n, wl) for n, wl in scanned if any(wl.refused.get(p) for p in policies)]
    nodes = nodes[:MAX_NODES]
    fig = Figure(figsize=(9, 1.4 + 0.5 * max(1, len(nodes))))
    ax = fig.subplots()
    if not nodes:
        _empty(fig, ax, "no fix would have refused a request on any node")
        return _save(fig, path)
    height = 0.8 / len(policies)
    palette = [COLORS.used, COLORS.tail, COLORS.ok]
    for k, p in enumerate(policies):
        ys = [i + k * height for i in range(len(nodes))]
        counts = [len(wl.refused.get(p, ())) for _, wl in nodes]
        ax.barh(ys, counts, height=height, label=p, color=palette[k % len(palette)])
        for y, (_, wl), c in zip(ys, nodes, counts, strict=True):
            delays = [r.delay_s for r in wl.refused.get(p, ()) if r.delay_s is not None]
            if c:
                text = f"first token up to +{max(delays):.2f} s" if delays else "delay unknown"
                ax.annotate(
                    text, (c, y), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8
                )
    ax.set_yticks(
        [i + 0.4 - height / 2 for i in range(len(nodes))], [names[n.node] for n, _ in nodes]
    )
    ax.invert_yaxis()
    ax.set_xlabel("requests admitted under prefix that the fix refuses in the same round")
    ax.set_title("What the fixes would have refused over the whole log")
    ax.legend(fontsize=8, loc="lower right")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(0, max(len(wl.refused.get(p, ())) for _, wl in nodes for p in policies) * 2)
    return _save(fig, path)
