"""The report's figures, drawn with matplotlib's object API on the Agg canvas (no pyplot:
no global backend, nothing opened on screen, safe to call from a library).

(a) pool use per round with the promised-but-unallocated tail stacked on top: the crash
    is visible as the stack crossing the pool's size rounds before the allocation fails.
(b) the focus round as a waterfall of the memory book: baseline, minus each step's lock,
    load-back and offset charge, down to the rem_total_tokens the round ends with."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, MaxNLocator

from kvforensics.model import RunResult
from kvforensics.outputs import atomic_write
from kvforensics.report.ledgers import ADDER_CALLS, ledger_of

DPI = 110
TOKENS = FuncFormatter(lambda v, _pos: f"{v:,.0f}")
COLORS = {"used": "#4c72b0", "tail": "#dd8452", "oom": "#c44e52", "ok": "#55a868"}


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=DPI, bbox_inches="tight"))
    return path


def pool_series(result: RunResult) -> list[tuple[int, int, int]]:
    """(round, used after the round, promised but unallocated) per round; a round that
    ran out of memory has no record, so it is added with the pool as the OOM left it."""
    pts = [(r.round, r.used_end, r.unallocated_tail) for r in result.rounds]
    if result.oom is not None:
        pts.append((result.oom.round, result.pool.size - result.oom.available, result.oom.tokens))
    return pts


def plot_pool(results: Mapping[str, RunResult], path: Path) -> Path:
    names = list(results)
    fig = Figure(figsize=(9, 2.6 * len(names) + 0.8))
    axes = fig.subplots(len(names), 1, sharex=True, sharey=True, squeeze=False)[:, 0]
    series = {p: pool_series(r) for p, r in results.items()}
    size = max(r.pool.size for r in results.values())
    lows = [u for pts in series.values() for _, u, _ in pts]
    # the story is in the last few percent of the pool: start the axis below the lowest use
    lo = max(0, min(lows, default=0) - 0.15 * (size - min(lows, default=0))) if lows else 0
    for ax, p in zip(axes, names, strict=True):
        pts = series[p]
        res = results[p]
        # one stair per round: rounds are discrete, a value holds from one round to the next
        edges = [x - 0.5 for x, _, _ in pts] + [pts[-1][0] + 0.5] if pts else [0, 1]
        used = [u for _, u, _ in pts]
        owed = [u + t for _, u, t in pts]
        if pts:
            ax.stairs(used, edges, baseline=lo, fill=True, color=COLORS["used"], alpha=0.55)
            ax.stairs(
                owed,
                edges,
                baseline=used,
                fill=True,
                facecolor="none",
                edgecolor=COLORS["tail"],
                hatch="///",
                lw=0,
            )
            ax.stairs(owed, edges, baseline=None, color=COLORS["tail"], lw=1.5)
        ax.axhline(res.pool.size, color="black", ls="--", lw=1)
        if res.oom is not None:
            o = res.oom
            ax.plot([o.round], [res.pool.size], marker="X", ms=13, color=COLORS["oom"], ls="none")
            ax.annotate(
                f"OOM: {o.rid} needs {o.tokens:,}, {o.available:,} available",
                (o.round, res.pool.size),
                xytext=(-12, -30),
                textcoords="offset points",
                ha="right",
                color=COLORS["oom"],
                fontsize=9,
                fontweight="bold",
            )
            title = f"{p}: out of memory in round {o.round}"
        else:
            title = f"{p}: no out of memory"
        over = [x for (x, _, _), w in zip(pts, owed, strict=True) if w > res.pool.size]
        if over:
            title += f"; in use + promised exceeds the pool from round {over[0]}"
        ax.set_title(title, fontsize=11, loc="left", color=COLORS["oom"] if res.oom else "black")
        ax.set_ylabel("tokens (KV slots)")
        ax.yaxis.set_major_formatter(TOKENS)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylim(lo, size + 0.12 * (size - lo))
    axes[-1].set_xlabel("scheduling round (value after the round's allocation)")
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    h = fig.get_figheight()
    fig.suptitle(
        f"KV pool use and promised-but-unallocated tokens per round (y axis starts at {lo:,.0f})",
        fontsize=12,
        y=1 - 0.12 / h,
    )
    handles = [
        Patch(color=COLORS["used"], alpha=0.55, label="KV slots in use"),
        Patch(
            facecolor="none",
            edgecolor=COLORS["tail"],
            hatch="///",
            label="promised, not yet allocated (chunked request's tail)",
        ),
        Line2D([], [], color="black", ls="--", label=f"pool size ({size:,})"),
        Line2D([], [], marker="X", ms=10, color=COLORS["oom"], ls="none", label="out of memory"),
    ]
    fig.legend(
        handles=handles,
        loc="upper center",
        ncol=4,
        fontsize=8,
        frameon=False,
        bbox_to_anchor=(0.5, 1 - 0.42 / h),
    )
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.75 / h))
    return _save(fig, path)


def waterfall_steps(df: pl.DataFrame) -> tuple[int, list[tuple[str, str, int]], int, int]:
    """(start baseline, [(label, kind, delta)], rem_total_tokens at the end, unreserved
    tail) for one round of one ledger. Kinds: lock, load-back, charge, reserve, refused,
    and check (not a charge: the memory need a later request was weighed against)."""
    rows = [r for r in df.sort("step").iter_rows(named=True) if r["call"] in ADDER_CALLS]
    if not rows:
        return 0, [], 0, 0
    start = rows[0]["baseline"]
    prev = start
    bars: list[tuple[str, str, int]] = []
    tail = 0
    after_truncation = False
    for r in rows:
        rid = r["rid"]
        if after_truncation and r["call"] == "add_one_req" and r["need"] is not None:
            # a request entering after a truncation: show what its memory check weighed
            need = r["need"]
            ok = need < r["rem_total_tokens"]
            bars.append((f"{rid}\nneeds {need:,}: {'passes' if ok else 'fails'}", "check", need))
        if r["baseline"] < prev:
            bars.append((f"{rid}\nlock prefix", "lock", r["baseline"] - prev))
        if r["load_back"]:
            bars.append((f"{rid}\nload-back", "load-back", -r["load_back"]))
        charge = r["total_offset_after"] - r["total_offset_before"]
        reserved = r["reserved_tail"] or 0
        if charge - reserved:
            bars.append((f"{rid}\ncharge", "charge", -(charge - reserved)))
        if reserved:
            bars.append((f"{rid}\ntail reserved", "reserve", -reserved))
        if r["decision"] == "rejected":
            bars.append((f"{rid}\nrefused ({r['budget_state']})", "refused", 0))
        if r["decision"] in ("truncated", "resumed") and r["end"] < r["seq_len"]:
            tail = 0 if reserved else r["seq_len"] - r["end"]
            after_truncation = True
        prev = r["baseline_after"]
    last = rows[-1]
    end = last["baseline_after"] - last["total_offset_after"]
    return start, bars, end, tail


KIND_COLORS = {
    "lock": "#8172b3",
    "load-back": "#c44e52",
    "charge": "#4c72b0",
    "reserve": "#55a868",
    "refused": "#999999",
    "check": "none",
}


def plot_waterfall(
    results: Mapping[str, RunResult | pl.DataFrame], round_no: int, path: Path
) -> Path:
    names = list(results)
    data = {
        p: waterfall_steps(ledger_of(x).filter(pl.col("round") == round_no))
        for p, x in results.items()
    }
    width = max(len(d[1]) for d in data.values()) + 3
    fig = Figure(figsize=(max(7.0, 0.8 * width) * len(names) / 1.4 + 1, 6.8))
    axes = fig.subplots(1, len(names), sharey=True, squeeze=False)[0]
    for ax, p in zip(axes, names, strict=True):
        start, bars, end, tail = data[p]
        labels, level = ["baseline\n(free + evictable)"], start
        ax.bar(0, start, color="#bbbbbb", edgecolor="black", lw=0.6)
        ax.text(0, start, f"{start:,}", ha="center", va="bottom", fontsize=8)
        for i, (label, kind, delta) in enumerate(bars, start=1):
            labels.append(label)
            if kind == "check":
                # drawn from the level it was checked against; the level does not move
                ok = level - delta > 0
                c = COLORS["ok"] if ok else COLORS["oom"]
                ax.bar(i, -delta, bottom=level, facecolor="none", edgecolor=c, ls="--", lw=1.5)
                ax.text(
                    i,
                    level - delta,
                    f"{level - delta:+,}",
                    ha="center",
                    va="bottom" if ok else "top",
                    fontsize=8,
                    color=c,
                )
                ax.plot([i - 0.4, i + 1.4], [level, level], color="black", lw=0.5, ls=":")
                continue
            top = level
            level += delta
            ax.bar(i, -delta, bottom=level, color=KIND_COLORS[kind], edgecolor="black", lw=0.6)
            if kind == "refused":
                ax.plot([i], [level], marker="x", color="black", ms=10)
            ax.text(i, top, f"{delta:+,}" if delta else "", ha="center", va="bottom", fontsize=8)
            ax.plot([i - 0.4, i + 1.4], [level, level], color="black", lw=0.5, ls=":")
        n = len(bars) + 1
        ax.bar(
            n,
            end,
            color=COLORS["ok"] if end - tail > 0 else COLORS["oom"],
            alpha=0.8,
            edgecolor="black",
            lw=0.6,
        )
        ax.text(n, max(end, 0), f"{end:,}", ha="center", va="bottom", fontsize=9, fontweight="bold")
        labels.append("rem_total_tokens\nafter the round")
        if tail:
            n += 1
            ax.bar(
                n, -tail, bottom=end, facecolor="white", edgecolor=COLORS["oom"], hatch="xx", lw=1.2
            )
            ax.text(
                n,
                end - tail,
                f"{end - tail:,}",
                ha="center",
                va="top",
                fontsize=9,
                color=COLORS["oom"],
                fontweight="bold",
            )
            labels.append(f"unreserved tail\n{tail:,} (not in\nthe offset)")
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=40, ha="right", fontsize=8)
        title = f"{p}: round {round_no} ends with rem_total_tokens {end:,}"
        if tail:
            title += f"\n({end - tail:,} once the unreserved tail of {tail:,} is counted)"
        ax.set_title(title, fontsize=10, loc="left")
        ax.yaxis.set_major_formatter(TOKENS)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("tokens (KV slots)")
    fig.suptitle(
        f"Round {round_no}: the memory book step by step (baseline minus locks, load-backs and offset charges)",
        fontsize=12,
    )
    fig.tight_layout()
    return _save(fig, path)

