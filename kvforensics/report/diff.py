"""Two ledgers side by side, and where they first part.

Two kinds of divergence are reported because they answer different questions: the
first *accounting* divergence is where the books first differ (under `fixed` that is the
truncation step, which reserves the tail); the first *outcome* divergence is where a
different thing happens to a request (admitted vs refused, another piece, a load-back).
The second is the headline; the first is usually its cause."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
from rich.console import Group

from kvforensics.causes.oom import oom_words
from kvforensics.model.ledger import Step
from kvforensics.report import _fmt
from kvforensics.report.ledgers import RoundSummary, held, normalize, round_summaries, steps_of
from kvforensics.report.terminal import FitTable, Hanging

#: what happened to a request (call/rid first: a different request at a step is a divergence)
OUTCOME_FIELDS = (
    "call",
    "rid",
    "decision",
    "start",
    "end",
    "load_back",
    "allocated",
    "budget_state",
)
#: the books kept while deciding
ACCOUNTING_FIELDS = (
    "baseline",
    "baseline_after",
    "total_offset_before",
    "total_offset_after",
    "cur_offset_before",
    "cur_offset_after",
    "rem_total_tokens",
    "cur_rem_tokens",
    "rem_chunk_tokens",
    "rem_chunk_after",
    "reserved_tail",
    "forced",
)
FIELDS = OUTCOME_FIELDS + ACCOUNTING_FIELDS
KEY_ACCOUNTING = ("rem_total_tokens", "total_offset_after", "reserved_tail")


@dataclass(slots=True)
class Divergence:
    round: int
    step: int
    fields: list[str]  # every compared field that differs at this step
    left: Step | None  # the ledger row, None if this side has no such step
    right: Step | None

    def as_dict(self) -> dict[str, object]:
        return {
            "round": self.round,
            "step": self.step,
            "fields": self.fields,
            "left": _pick(self.left),
            "right": _pick(self.right),
        }

    def describe(self, left_name: str, right_name: str) -> str:
        row = self.left or self.right
        who = row.rid if row is not None else None
        if self.left is None or self.right is None:
            side = right_name if self.left is None else left_name
            return f"round {self.round}, step {self.step}: only {side} has this step ({who})"
        # values for what happened and the memory book that decided it; other fields by name
        shown = [f for f in self.fields if f in OUTCOME_FIELDS or f in KEY_ACCOUNTING]
        parts = [
            f"{f} {_fmt.num(getattr(self.left, f))} vs {_fmt.num(getattr(self.right, f))}"
            for f in shown
        ]
        rest = [f for f in self.fields if f not in shown]
        if rest:
            parts.append("also " + ", ".join(rest))
        return f"round {self.round}, step {self.step} ({who}): " + "; ".join(parts)


@dataclass(slots=True)
class DiffRound:
    round: int
    left: RoundSummary | None
    right: RoundSummary | None
    differs: bool


@dataclass(slots=True)
class Diff:
    left_name: str
    right_name: str
    rounds: list[DiffRound]
    first_divergence: Divergence | None  # first outcome divergence
    first_accounting_divergence: Divergence | None

    @property
    def identical(self) -> bool:
        return self.first_divergence is None and self.first_accounting_divergence is None

    def as_dict(self) -> dict[str, object]:
        def side(s: RoundSummary | None) -> dict[str, object] | None:
            if s is None:
                return None
            return {
                "pieces": [{"rid": r, "start": a, "end": b} for r, a, b in s.pieces],
                "decisions": [
                    {"call": c, "rid": r, "decision": d, "result": st}
                    for c, r, d, st in s.decisions
                ],
                "baseline_after": s.baseline_after,
                "unallocated_tail": s.unallocated_tail,
                "oom": s.oom.as_dict() if s.oom else None,
            }

        fd, fa = self.first_divergence, self.first_accounting_divergence
        return {
            "left": self.left_name,
            "right": self.right_name,
            "identical": self.identical,
            "first_divergence": fd.as_dict() if fd else None,
            "first_accounting_divergence": fa.as_dict() if fa else None,
            "rounds": [
                {
                    "round": r.round,
                    "differs": r.differs,
                    "left": side(r.left),
                    "right": side(r.right),
                }
                for r in self.rounds
            ],
        }

    def headline(self) -> list[str]:
        if self.identical:
            return [f"{self.left_name} and {self.right_name}: no divergence (identical ledgers)"]
        lines = []
        fd, fa = self.first_divergence, self.first_accounting_divergence
        if fd:
            lines.append("first divergence: " + fd.describe(self.left_name, self.right_name))
        else:
            lines.append("no outcome divergence: the same requests got the same pieces")
        if fa and (fd is None or (fa.round, fa.step) < (fd.round, fd.step)):
            lines.append("books differ earlier: " + fa.describe(self.left_name, self.right_name))
        return lines

    def to_markdown(self) -> str:
        L, R = self.left_name, self.right_name
        out = [f"### {L} vs {R}", ""]
        out += [f"- {line}" for line in self.headline()]
        out.append("")
        headers = [
            "round",
            "",
            f"{L} pieces",
            f"{L} decisions",
            f"{L} baseline after",
            f"{L} unallocated tail",
            f"{R} pieces",
            f"{R} decisions",
            f"{R} baseline after",
            f"{R} unallocated tail",
        ]
        rows = [
            [r.round, "≠" if r.differs else "", *_cells(r.left), *_cells(r.right)]
            for r in self.rounds
        ]
        out.append(_fmt.md_table(headers, rows, right=(0, 4, 5, 8, 9)))
        return "\n".join(out) + "\n"

    def rich(self) -> Group:
        """A terminal rendering: the per-round table with the divergent round marked."""
        L, R = self.left_name, self.right_name
        headers = ["round"]
        for name in (L, R):
            headers += [f"{name} pieces", f"{name} decisions", f"{name} B after", f"{name} tail"]
        t = FitTable(headers, title=f"{L} vs {R}", right=(0, 3, 4, 7, 8), show_lines=True)
        fd = self.first_divergence or self.first_accounting_divergence
        for r in self.rounds:
            style = (
                "bold yellow" if fd and r.round == fd.round else ("yellow" if r.differs else None)
            )
            t.add_row(r.round, *_cells(r.left), *_cells(r.right), style=style)
        notes = [Hanging("• ", line) for line in self.headline()]
        return Group(t, *notes)


def _cells(s: RoundSummary | None) -> list[str]:
    if s is None:
        return ["(no round)", "", "", ""]
    dec = _fmt.decisions(s.decisions)
    if s.oom:
        dec += f"; OUT OF MEMORY {oom_words(s.oom.tokens, s.oom.available, form='allocating')}"
    return [_fmt.pieces(s.pieces), dec, _fmt.num(s.baseline_after), _fmt.num(s.unallocated_tail)]


def _pick(row: Step | None) -> dict[str, object] | None:
    """The compared fields of a ledger row, for the JSON."""
    return None if row is None else {k: getattr(row, k) for k in ("round", "step", *FIELDS)}


def _key(row: Step) -> tuple[int, int]:
    return held(row.round), held(row.step)


def diff_ledgers(left: pl.DataFrame, right: pl.DataFrame, left_name: str, right_name: str) -> Diff:
    """Compare two single-policy ledgers step by step (aligned on round and step)."""
    left, right = normalize(left, left_name), normalize(right, right_name)
    lrows = {_key(r): r for r in steps_of(left)}
    rrows = {_key(r): r for r in steps_of(right)}
    first_out: Divergence | None = None
    first_acc: Divergence | None = None
    differing_rounds: set[int] = set()
    for key in sorted(lrows.keys() | rrows.keys()):
        a, b = lrows.get(key), rrows.get(key)
        if a is None or b is None:
            fields = ["(missing step)"]
            outcome = True
        else:
            fields = [f for f in FIELDS if getattr(a, f) != getattr(b, f)]
            outcome = any(f in OUTCOME_FIELDS for f in fields)
        if not fields:
            continue
        differing_rounds.add(key[0])
        div = Divergence(key[0], key[1], fields, a, b)
        first_acc = first_acc or div
        if outcome and first_out is None:
            first_out = div
    ls = {s.round: s for s in round_summaries(left)}
    rs = {s.round: s for s in round_summaries(right)}
    rounds = [
        DiffRound(n, ls.get(n), rs.get(n), n in differing_rounds or (n in ls) != (n in rs))
        for n in sorted(ls.keys() | rs.keys())
    ]
    return Diff(left_name, right_name, rounds, first_out, first_acc)
