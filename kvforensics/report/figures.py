"""The report's figures, drawn with matplotlib's object API on the Agg canvas (no pyplot:
no global backend, nothing opened on screen, safe to call from a library).

(a) pool use per round with the promised-but-unallocated tail stacked on top: the crash
    is visible as the stack crossing the pool's size rounds before the allocation fails.
(b) the focus round as a waterfall of the memory book: baseline, minus each step's lock,
    load-back and offset charge, down to the rem_total_tokens the round ends with."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from kvforensics.causes.oom import oom_words
from kvforensics.model import RunResult
from kvforensics.model.decisions import ADDER_CALLS, BudgetState, Call, Decision
from kvforensics.plotting import COLORS, TOKENS
from kvforensics.plotting import save_png as _save
from kvforensics.report.ledgers import ledger_of, steps_of
from kvforensics.report.terminal import shorten_words

#: about 1600 px wide at DPI: fits a document page at full width
WIDTH_IN = 14.5


def pool_series(result: RunResult) -> list[tuple[int, int, int, int]]:
    """(round, used after the round, of which loaded back in the round, promised but
    unallocated) per round; a round that ran out of memory has no record, so it is added
    with the pool as the OOM left it."""
    loads = (
        result.ledger.to_frame()
        .group_by("round")
        .agg(pl.col("load_back").fill_null(0).sum())
        .rows()
    )
    loaded = dict(loads)
    pts = [
        (r.round, r.used_end, min(loaded.get(r.round, 0), r.used_end), r.unallocated_tail)
        for r in result.rounds
    ]
    if result.oom is not None:
        o = result.oom
        pts.append((o.round, result.pool.size - o.available, 0, o.tokens))
    return pts


def _groups(results: Mapping[str, RunResult]) -> list[tuple[list[str], RunResult]]:
    """Policies whose pool series are the same share one panel."""
    groups: list[tuple[list[str], RunResult, list[tuple[int, int, int, int]]]] = []
    for p, r in results.items():
        pts = pool_series(r)
        for names, _, seen in groups:
            if seen == pts and (r.oom is None) == (_.oom is None):
                names.append(p)
                break
        else:
            groups.append(([p], r, pts))
    return [(names, r) for names, r, _ in groups]


def plot_pool(
    results: Mapping[str, RunResult],
    path: Path,
    *,
    focus: int | None = None,
    history: Sequence[tuple[int, int]] = (),
) -> Path:
    """One panel per distinct outcome; ``history`` is (round, slots in use) logged before
    the replay's first round, drawn as context."""
    groups = _groups(results)
    size = max(r.pool.size for r in results.values())
    fig = Figure(figsize=(WIDTH_IN, 2.9 * len(groups) + 1.1))
    axes = fig.subplots(len(groups), 1, sharex=True, sharey=True, squeeze=False)[:, 0]
    lows = [u - lb for _, r in groups for _, u, lb, _ in pool_series(r)] + [u for _, u in history]
    lo = max(0, min(lows, default=0) - 0.1 * (size - min(lows, default=0)))
    for ax, (names, res) in zip(axes, groups, strict=True):
        _pool_panel(ax, names, res, lo, focus, history)
    axes[0].set_ylim(lo, size + 0.14 * (size - lo))
    axes[-1].set_xlabel("scheduling round (value after the round's allocation)", fontsize=11)
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    h = fig.get_figheight()
    fig.suptitle(
        f"KV pool use per round (y axis from {lo:,.0f}; pool {size:,} slots)",
        fontsize=14,
        y=1 - 0.1 / h,
    )
    handles = [
        Patch(color=COLORS.history, alpha=0.6, label="in use (logged, before the replay)"),
        Patch(color=COLORS.used, alpha=0.6, label="in use (replayed)"),
        Patch(color=COLORS.load, alpha=0.85, label="of which loaded back from host in that round"),
        Patch(facecolor="none", edgecolor=COLORS.tail, hatch="///", label="promised, not allocated (a chunked request's tail)"),
        Line2D([], [], color="black", ls="--", label="pool size"),
        Line2D([], [], marker="X", ms=10, color=COLORS.oom, ls="none", label="out of memory"),
    ]  # fmt: skip
    fig.legend(
        handles=handles, loc="upper center", ncol=3, fontsize=10, frameon=False,
        bbox_to_anchor=(0.5, 1 - 0.42 / h),
    )  # fmt: skip
    fig.tight_layout(rect=(0, 0, 1, 1 - 1.0 / h))
    return _save(fig, path)


def _pool_panel(
    ax: Axes, names: list[str], res: RunResult, lo: float, focus: int | None,
    history: Sequence[tuple[int, int]],
) -> None:  # fmt: skip
    pts = pool_series(res)
    if history:
        hx = [x - 0.5 for x, _ in history] + [history[-1][0] + 0.5]
        ax.stairs(
            [u for _, u in history], hx, baseline=lo, fill=True, color=COLORS.history, alpha=0.6
        )
    if pts:
        edges = [x - 0.5 for x, *_ in pts] + [pts[-1][0] + 0.5]
        base = [u - lb for _, u, lb, _ in pts]
        used = [u for _, u, _, _ in pts]
        owed = [u + t for _, u, _, t in pts]
        ax.stairs(base, edges, baseline=lo, fill=True, color=COLORS.used, alpha=0.6)
        ax.stairs(used, edges, baseline=base, fill=True, color=COLORS.load, alpha=0.85)
        ax.stairs(
            owed,
            edges,
            baseline=used,
            fill=True,
            facecolor="none",
            edgecolor=COLORS.tail,
            hatch="///",
            lw=0,
        )
        ax.stairs(owed, edges, baseline=None, color=COLORS.tail, lw=1.5)
    ax.axhline(res.pool.size, color="black", ls="--", lw=1)
    if focus is not None:
        ax.axvline(focus - 0.5, color="#555555", lw=1, ls=":")
        ax.text(
            focus - 0.45,
            lo,
            f" replay from round {focus}",
            fontsize=9,
            va="bottom",
            color="#555555",
        )
    label = ", ".join(names) + (" (the same)" if len(names) > 1 else "")
    if res.oom is not None:
        o = res.oom
        ax.plot([o.round], [res.pool.size], marker="X", ms=13, color=COLORS.oom, ls="none")
        # written left of the replayed rounds, where the per-round labels are not
        ax.annotate(
            f"out of memory: {oom_words(o.tokens, o.available, rid=shorten_words(o.rid), form='needs')}",
            (o.round, res.pool.size), xytext=(pts[0][0] - 0.7, (res.pool.size + lo) / 2),
            ha="right", va="center", color=COLORS.oom, fontsize=10, fontweight="bold",
            arrowprops={"arrowstyle": "->", "color": COLORS.oom},
        )  # fmt: skip
        title = f"{label}: out of memory in round {o.round}"
    else:
        title = f"{label}: no out of memory"
    over = [x for x, u, _, t in pts if u + t > res.pool.size]
    if over:
        title += f"; in use + promised exceeds the pool from round {over[0]}"
    for x, u, _, t in pts:
        if t:  # the promise is thin on this scale: say how much it is
            ax.text(x, u + t, f"+{t:,}", ha="center", va="bottom", fontsize=9, color=COLORS.tail)
    ax.set_title(title, fontsize=12, loc="left", color=COLORS.oom if res.oom else "black")
    ax.set_ylabel("KV slots", fontsize=11)
    ax.tick_params(labelsize=10)
    ax.yaxis.set_major_formatter(TOKENS)
    ax.grid(axis="y", alpha=0.3)


def _n(value: int | None) -> int:
    """A number every adder step of a ledger holds (its books)."""
    if value is None:
        raise ValueError("an adder step lacks a number of its books")
    return value


#: a waterfall bar: (label, kind, delta), a memory check's also the rem_total_tokens it saw
Bar = tuple[str, str, int] | tuple[str, str, int, int]


def waterfall_steps(df: pl.DataFrame) -> tuple[int, list[Bar], int, int]:
    """(start baseline, [(label, kind, delta)], rem_total_tokens at the end, unreserved
    tail) for one round of one ledger, read off the adder's records (``model.ledger.Step``):
    nothing here re-derives a rule. Kinds: lock, load-back, charge, reserve, refused, and
    check / check-fails (not a charge: the memory need a later request was weighed
    against, and whether the adder let it pass)."""
    rows = [r for r in steps_of(df.sort("step")) if r.call in ADDER_CALLS]
    if not rows:
        return 0, [], 0, 0
    start = prev = _n(rows[0].baseline)
    bars: list[Bar] = []
    tail = 0
    after_truncation = False
    for r in rows:
        rid, base, after = r.rid, _n(r.baseline), _n(r.baseline_after)
        if base < prev:  # the adder locks a prefix before it checks
            bars.append((f"{rid}\nlock prefix", "lock", base - prev))
        if after_truncation and r.call == Call.ADD_ONE_REQ and r.need is not None:
            # a request entering after a truncation: what its memory check weighed, against
            # the rem_total_tokens it saw, and the adder's answer
            failed = r.decision == Decision.REJECTED and r.budget_state == BudgetState.NO_TOKEN
            kind = "check-fails" if failed else "check"
            bars.append(
                (f"{rid}\nneeds {r.need:,}: {'fails' if failed else 'passes'}", kind,
                 r.need, _n(r.rem_total_tokens))
            )  # fmt: skip
        if r.load_back:  # the slots it took, page-exact: the baseline's fall
            bars.append((f"{rid}\nload-back", "load-back", after - base))
        charge = _n(r.total_offset_after) - _n(r.total_offset_before)
        reserved = r.reserved_tail or 0
        if charge - reserved:
            bars.append((f"{rid}\ncharge", "charge", -(charge - reserved)))
        if reserved:
            bars.append((f"{rid}\ntail reserved", "reserve", -reserved))
        if r.decision == Decision.REJECTED:
            bars.append((f"{rid}\nrefused ({r.budget_state})", "refused", 0))
        if r.tail_need is not None:  # a piece that left a tail for later rounds
            tail = 0 if reserved else r.tail_need
            after_truncation = True
        prev = after
    # the level the drawn steps reach (a check does not move it)
    end = start + sum(b[2] for b in bars if not b[1].startswith("check"))
    return start, bars, end, tail


KIND_COLORS = {
    "lock": "#8172b3",
    "load-back": "#c44e52",
    "charge": "#4c72b0",
    "reserve": "#55a868",
    "refused": "#999999",
    "check": "none",
    "check-fails": "none",
}


def plot_waterfall(
    results: Mapping[str, RunResult | pl.DataFrame], round_no: int, path: Path
) -> Path:
    """One row per policy: the whole book on the left, and on the right the same steps
    from the first truncation on, on a scale where a few thousand tokens show."""
    names = list(results)
    data = {
        p: waterfall_steps(ledger_of(x).filter(pl.col("round") == round_no))
        for p, x in results.items()
    }
    letters = _letters(data.values())
    fig = Figure(figsize=(WIDTH_IN, 5.0 * len(names) + 1.0))
    axes = fig.subplots(len(names), 1, squeeze=False)[:, 0]
    for ax, p in zip(axes, names, strict=True):
        start, bars, end, tail = data[p]
        steps = _levels(start, _short(bars, letters), end, tail)
        zoomed = _zoom_inset(ax, steps)
        _draw_steps(ax, steps, quiet_from=zoomed)
        ax.set_xlim(-0.5, len(steps) - 0.5)
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo - 0.06 * (hi - lo), hi)  # room for the labels under the lowest bars
        title = f"{p}: ends with rem_total_tokens {end:,}"
        if tail:
            title += (
                f"; {end - tail:,} once the {tail:,} its unreserved tail needs (pages and first "
                "token) are counted"
            )
        ax.set_title(
            title, fontsize=12, loc="left", color=COLORS.oom if end - tail < 0 else "black"
        )
        ax.set_ylabel("KV slots", fontsize=11)
    h = fig.get_figheight()
    fig.suptitle(
        f"Round {round_no}: the memory book step by step (baseline minus locks, "
        "load-backs and offset charges)",
        fontsize=14,
        y=1 - 0.1 / h,
    )
    # a figure grows to fit its text (bbox "tight"): a 100,000-character rid would
    # make it a million pixels wide
    key = "   ".join(f"{v} = {shorten_words(k)}" for k, v in letters.items() if k != v)
    if key:
        fig.text(
            0.5, 1 - 0.5 / h, f"in the order the adder saw them: {key}", ha="center", fontsize=11
        )
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.75 / h))
    return _save(fig, path)


#: a drawn bar: (label, kind, bottom, top)
Level = tuple[str, str, float, float]


def _zoom_inset(ax: Axes, steps: list[Level]) -> int | None:
    """The steps from the truncation on, magnified in the empty upper right of the
    book (a waterfall only falls); skipped when they are already large enough to read."""
    z = _zoom_from(steps)
    part = steps[z:]
    top = max((max(b, t) for _, _, b, t in part), default=0)
    if not part or top > 0.35 * steps[0][3]:
        return None
    x0 = z / len(steps) + 0.03
    inset = ax.inset_axes((x0, 0.36, 0.995 - x0, 0.6))
    _draw_steps(inset, part, offset=z)
    inset.set_xlim(z - 0.5, len(steps) - 0.5)
    inset.yaxis.tick_right()  # clear of the tall bars to its left
    # the zoomed steps come after the large drops: their own range is the scale
    lo = min(0.0, *(min(b, t) for _, _, b, t in part))
    pad = 0.12 * (top - lo or 1)
    inset.set_ylim(lo - pad, top + pad)
    inset.tick_params(axis="x", labelsize=8)
    inset.set_title("zoomed: from the truncation on", fontsize=10, loc="left")
    ax.indicate_inset_zoom(inset, edgecolor="#444444")
    return z


def _letters(data: Iterable[tuple[int, list[Bar], int, int]]) -> dict[str, str]:
    """A, B, C... for the requests, in the order the adder first saw them (the
    postmortem's names); labels stay short enough to sit side by side."""
    out: dict[str, str] = {}
    rids = {b[0].split("\n", 1)[0] for _, bars, _, _ in data for b in bars}
    if all(len(r) <= 3 for r in rids):  # already short: keep the names
        return {r: r for r in rids}
    for _, bars, _, _ in data:
        for label, *_ in bars:
            rid = label.split("\n", 1)[0]
            if rid not in out:
                n = len(out)
                out[rid] = chr(ord("A") + n) if n < 26 else f"R{n}"
    return out


def _short(bars: list[Bar], letters: dict[str, str]) -> list[Bar]:
    """The bars with each request's letter for its id, the words on their own lines."""
    out: list[Bar] = []
    for bar in bars:
        rid, _, what = bar[0].partition("\n")
        what = what.replace(": ", "\n", 1).replace(" (", "\n(", 1)
        label = f"{letters.get(rid, rid)} {what}"
        out.append((label, bar[1], bar[2], bar[3]) if len(bar) == 4 else (label, bar[1], bar[2]))
    return out


def _levels(start: int, bars: list[Bar], end: int, tail: int) -> list[Level]:
    """(label, kind, bottom, top) of every bar, in order, from the books."""
    out: list[Level] = [("baseline\nfree+evictable", "baseline", 0, start)]
    level = start
    for label, kind, delta, *at in bars:
        if kind.startswith("check"):  # what a later request weighed; the level does not move
            out.append((label, kind, at[0] - delta, at[0]))
            continue
        out.append((label, kind, level + delta, level))
        level += delta
    out.append(("rem_total_tokens\nat the end", "end", 0, end))
    if tail:
        out.append((f"unreserved\ntail needs {tail:,}", "tail", end - tail, end))
    return out


def _zoom_from(steps: list[Level]) -> int:
    """The first step after the last large drop before the end: where a small scale
    starts to show what the large one hides."""
    first = next(
        (i for i, s in enumerate(steps) if "tail reserved" in s[0] or s[1].startswith("check")),
        None,
    )
    if first is None:
        first = max(1, len(steps) - 4)
    return max(1, first - 1)


def _draw_steps(
    ax: Axes, steps: list[Level], *, offset: int = 0, quiet_from: int | None = None
) -> None:
    """Bars at ``offset + i``; from ``quiet_from`` on, no value text (an inset has it)."""
    for i, (_label, kind, bottom, top) in enumerate(steps):
        x = offset + i
        say = quiet_from is None or i < quiet_from
        c, text, va, weight = "black", f"{bottom - top:+,.0f}", "bottom", "normal"
        if kind.startswith("check"):
            ok = kind == "check"  # the adder's answer, from its record
            c = COLORS.ok if ok else COLORS.oom
            ax.bar(x, top - bottom, bottom=bottom, facecolor="none", edgecolor=c, ls="--", lw=1.8)
            text, va, weight = f"{bottom:+,.0f}\n{'passes' if ok else 'fails'}", "top", "bold"
            y = bottom
        elif kind == "tail":
            c = COLORS.oom
            ax.bar(
                x, top - bottom, bottom=bottom, facecolor="white", edgecolor=c, hatch="xx", lw=1.4
            )
            text, va, weight, y = f"{bottom:,.0f}", "top", "bold", bottom
        else:
            color = {"baseline": "#bbbbbb", "end": COLORS.ok}.get(kind, KIND_COLORS.get(kind))
            if kind == "end" and top <= 0:
                color = COLORS.oom
            ax.bar(x, top - bottom, bottom=bottom, color=color, edgecolor="black", lw=0.6)
            if kind in ("baseline", "end"):
                text, weight = f"{top:,.0f}", "bold" if kind == "end" else "normal"
            if kind == "refused":
                ax.plot([x], [bottom], marker="x", color="black", ms=10)
                text = ""
            y = max(top, bottom)
        if say and text:
            ax.text(x, y, text, ha="center", va=va, fontsize=10, color=c, fontweight=weight)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks([offset + i for i in range(len(steps))])
    ax.set_xticklabels([s[0] for s in steps], fontsize=9)
    ax.yaxis.set_major_formatter(TOKENS)
    ax.tick_params(axis="y", labelsize=10)
    ax.grid(axis="y", alpha=0.3)

