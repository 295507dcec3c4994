"""One round told step by step under each policy, the way the postmortem tells round R:
the numbers each step saw, then a sentence saying why it decided what it did."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import polars as pl
from rich.console import Group, RenderableType
from rich.text import Text

from kvforensics.errors import InputError
from kvforensics.model import RunResult
from kvforensics.model.decisions import ADDER_CALLS, BudgetState, Call, Decision
from kvforensics.model.ledger import Step as Row
from kvforensics.model.policies import FIX
from kvforensics.report import _fmt
from kvforensics.report.diff import diff_ledgers
from kvforensics.report.ledgers import ledger_of, page_size_of, steps_of
from kvforensics.report.terminal import FitTable, Hanging

#: (key, header) of the step table, in the postmortem's reading order
STEP_COLUMNS = (
    ("step", "step"),
    ("call", "call"),
    ("rid", "rid"),
    ("seq_len", "seq_len"),
    ("device_prefix", "device prefix"),
    ("host_hit", "host hit"),
    ("need", "memory need"),
    ("baseline", "baseline"),
    ("total_offset", "rem_total_token_offset"),
    ("cur_offset", "cur_rem_token_offset"),
    ("rem_total_tokens", "rem_total_tokens"),
    ("cur_rem_tokens", "cur_rem_tokens"),
    ("chunk", "chunk budget"),
    ("decision", "decision"),
    ("piece", "piece"),
    ("load_back", "load-back"),
    ("reserved_tail", "reserved tail"),
    ("budget_state", "budget_state"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Cells:
    """The step table's cells, one field per STEP_COLUMNS key (numbers stay numbers)."""

    step: int | None = None
    call: str | None = None
    rid: str | None = None
    seq_len: int | None = None
    device_prefix: int | None = None
    host_hit: int | None = None
    need: int | None = None
    baseline: int | None = None
    total_offset: str | None = None
    cur_offset: str | None = None
    rem_total_tokens: int | None = None
    cur_rem_tokens: int | None = None
    chunk: str | None = None
    decision: str | None = None
    piece: str | None = None
    load_back: int | None = None
    reserved_tail: int | None = None
    budget_state: str | None = None

    def row(self) -> list[object]:
        return [getattr(self, k) for k, _ in STEP_COLUMNS]

    def as_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k, _ in STEP_COLUMNS}


@dataclass(frozen=True, slots=True)
class Step:
    values: Cells
    sentence: str


@dataclass(slots=True)
class Explanation:
    round: int
    steps: dict[str, list[Step]]  # by policy; a policy without this round has []
    page_size: dict[str, int | None]
    contrast: list[str] = field(default_factory=list)  # where the first two policies part

    def as_dict(self) -> dict[str, object]:
        return {
            "round": self.round,
            "contrast": self.contrast,
            "policies": {
                p: {
                    "page_size": self.page_size.get(p),
                    "steps": [{**s.values.as_dict(), "sentence": s.sentence} for s in steps],
                }
                for p, steps in self.steps.items()
            },
        }

    def to_markdown(self, heading: str = "###", title: bool = True) -> str:
        out = [f"{heading} Round {self.round}", ""] if title else []
        out += [f"- {c}" for c in self.contrast]
        for policy, steps in self.steps.items():
            out += ["", f"{heading}# under `{policy}`", ""]
            if not steps:
                out.append(f"(no round {self.round} under {policy})")
                continue
            out.append(
                _fmt.md_table(
                    [h for _, h in STEP_COLUMNS],
                    _rows(steps),
                    right=(0, 3, 4, 5, 6, 7, 10, 11, 15, 16),
                )
            )
            out.append("")
            out += [f"{s.values.step}. {s.sentence}" for s in steps]
        return "\n".join(out) + "\n"

    def rich(self) -> Group:
        parts: list[RenderableType] = [Text(f"Round {self.round}", style="bold")]
        parts += [Hanging("• ", c) for c in self.contrast]
        for policy, steps in self.steps.items():
            t = FitTable(
                [h for _, h in STEP_COLUMNS],
                title=f"round {self.round} under {policy}",
                key=3,
                right=(0, 3, 4, 5, 6, 7, 10, 11, 15, 16),
                show_lines=True,
            )
            for row in _rows(steps):
                t.add_row(*(_fmt.num(v) for v in row))
            parts.append(t)
            parts += [Hanging(f"{s.values.step}. ", s.sentence) for s in steps]
        return Group(*parts)


def _rows(steps: list[Step]) -> list[list[object]]:
    return [s.values.row() for s in steps]


def explain_round(results: Mapping[str, RunResult | pl.DataFrame], round_no: int) -> Explanation:
    """Round `round_no` under each policy (RunResults, or one-policy ledger frames)."""
    frames = {p: ledger_of(x) for p, x in results.items()}
    # membership in Python: a round number beyond 64 bits is simply absent
    if not any(round_no in set(f["round"].unique().to_list()) for f in frames.values()):
        # a damaged ledger may hold null rounds: they are no round to name
        rounds = {n for f in frames.values() for n in f["round"].unique().to_list()}
        present = sorted(n for n in rounds if n is not None)
        span = f"{present[0]}..{present[-1]}" if present else "none"
        raise InputError(f"round {round_no} is not in the ledgers (rounds present: {span})")
    pages = {
        p: page_size_of(x if isinstance(x, RunResult) else frames[p]) for p, x in results.items()
    }
    fix = frames.get(FIX)
    refused = _refused(fix.filter(pl.col("round") == round_no)) if fix is not None else None
    steps = {
        p: _explain_steps(f.filter(pl.col("round") == round_no), pages[p], refused)
        for p, f in frames.items()
    }
    contrast = []
    names = list(frames)
    if len(names) >= 2:
        a, b = names[0], names[1]
        d = diff_ledgers(
            frames[a].filter(pl.col("round") == round_no),
            frames[b].filter(pl.col("round") == round_no),
            a,
            b,
        )
        contrast = [f"{a} vs {b}: " + line for line in d.headline()]
    return Explanation(round_no, steps, pages, contrast)


def _refused(rows: pl.DataFrame) -> frozenset[str]:
    """The requests the fix's memory check refused in the round (its ledger's answer)."""
    return frozenset(
        s.rid
        for s in steps_of(rows)
        if s.call == Call.ADD_ONE_REQ
        and s.decision == Decision.REJECTED
        and s.budget_state == BudgetState.NO_TOKEN
        and s.rid is not None
    )


def explain_rid(results: Mapping[str, RunResult | pl.DataFrame], rid: str) -> list[Explanation]:
    """Every round, under any policy, in which `rid` has a step."""
    frames = {p: ledger_of(x) for p, x in results.items()}
    rounds = sorted(
        {n for f in frames.values() for n in f.filter(pl.col("rid") == rid)["round"].to_list()}
    )
    if not rounds:
        raise InputError(f"request {rid!r} does not appear in the ledgers")
    return [explain_round(results, n) for n in rounds]


@dataclass(frozen=True, slots=True)
class Tail:
    """The round's truncated request so far: its tail, how much of it went into the books,
    and the pages and first token it needs."""

    rid: str | None
    tail: int
    reserved: int
    tail_need: int | None


def _explain_steps(
    rows: pl.DataFrame, page: int | None, refused: frozenset[str] | None
) -> list[Step]:
    out: list[Step] = []
    prev_base: int | None = None
    # the round's truncated request and whether its tail went into the books
    truncated: Tail | None = None
    for r in steps_of(rows.sort("step")):
        if r.call in ADDER_CALLS:
            step, truncated = _adder_step(r, page, prev_base, truncated, refused)
        else:
            step = _allocate_step(r)
        out.append(step)
        prev_base = r.baseline_after
    return out


def _adder_step(
    r: Row, page: int | None, prev_base: int | None, truncated: Tail | None,
    refused: frozenset[str] | None,
) -> tuple[Step, Tail | None]:  # fmt: skip
    """One adder call in words; ``truncated`` is the round's truncated request so far (its
    tail and whether it went into the books), returned updated."""
    one_req = r.call == Call.ADD_ONE_REQ
    need = r.need if one_req else None
    start, end = r.start, r.end
    piece_len = (end - start) if start is not None and end is not None else None
    words: list[str] = []
    if prev_base is not None and r.baseline is not None and r.baseline < prev_base:
        words.append(
            f"locking {r.rid}'s device prefix takes {prev_base - r.baseline} out of the "
            f"evictable part (baseline {prev_base} → {r.baseline})"
        )
    if not one_req:
        truncated = _resumed_words(r, piece_len, words) or truncated
    else:
        words.append(_memory_check_words(r, need, truncated, refused))
        truncated = _admission_words(r, page, piece_len, words) or truncated
    words.append(f"budget_state {r.budget_state}")
    return Step(_step_values(r, need, piece_len), "; ".join(words) + "."), truncated


def _step_values(r: Row, need: int | None, piece_len: int | None) -> Cells:
    return Cells(
        step=r.step,
        call=r.call,
        rid=r.rid,
        seq_len=r.seq_len,
        device_prefix=r.device_prefix,
        host_hit=r.host_hit,
        need=need,
        baseline=r.baseline,
        total_offset=_fmt.arrow(r.total_offset_before, r.total_offset_after),
        cur_offset=_fmt.arrow(r.cur_offset_before, r.cur_offset_after),
        rem_total_tokens=r.rem_total_tokens,
        cur_rem_tokens=r.cur_rem_tokens,
        chunk=_fmt.arrow(r.rem_chunk_tokens, r.rem_chunk_after),
        decision=r.decision,
        piece=f"[{r.start}, {r.end}) {piece_len}" if piece_len is not None else "-",
        load_back=r.load_back,
        reserved_tail=r.reserved_tail,
        budget_state=r.budget_state,
    )


def _resumed_words(r: Row, piece_len: int | None, words: list[str]) -> Tail | None:
    """``add_chunked_req``: how the resumed piece was sized; the request if a tail is left."""
    rid, seq, start, end = r.rid, r.seq_len, r.start, r.end
    rem_total, chunk, raw = r.rem_total_tokens, r.rem_chunk_tokens, r.unaligned_end
    n = raw - start if raw is not None and start is not None else None
    how = (
        f"rem_total_tokens {rem_total} ≤ 0, so the forced branch allows the whole chunk budget {chunk}"
        if r.forced
        else f"allowed min(chunk {chunk}, rem_total_tokens {rem_total}) = {n}"
    )
    if end is not None and seq is not None and end == seq:
        how += f"; the last piece ({piece_len}) is all that is left"
    elif end is not None and raw is not None and raw != end:
        how += f"; end {raw} aligned down to {end}"
    words.append(f"{rid} resumes at {start}: {how}; computes [{start}, {end}) = {piece_len}")
    if end is None or seq is None or end >= seq:
        return None
    tail = seq - end
    words.append(f"still {tail} to go after this piece")
    return Tail(rid, tail, r.reserved_tail or 0, r.tail_need)


def _memory_check_words(
    r: Row, need: int | None, truncated: Tail | None, refused: frozenset[str] | None
) -> str:
    """``add_one_req``: what it asks for and how the memory check went, and whether an
    earlier truncation's tail decided it (``refused``: whom the fix's ledger refused)."""
    rid, seq, dp, hh = r.rid, r.seq_len, r.device_prefix, r.host_hit
    extend = seq - ((dp or 0) + (hh or 0)) if seq is not None else None
    asks = f"{rid} asks for {seq} ({dp} on device, {hh} on host; {extend} to compute)"
    rem_total = r.rem_total_tokens
    if need is None or rem_total is None:
        return asks
    ok = need < rem_total
    check = f"memory check {need} {'<' if ok else '≥'} {rem_total} {'passes' if ok else 'fails'}"
    if ok and truncated and not truncated.reserved:
        if _fix_refuses(r, need, rem_total, truncated, refused):
            check += (
                f" only because {truncated.rid}'s tail of {truncated.tail} is not in "
                "rem_total_token_offset"
            )
        else:
            check += (
                f" ({truncated.rid}'s tail of {truncated.tail} is not in rem_total_token_offset)"
            )
    elif not ok and truncated and truncated.reserved:
        check += f" because {truncated.rid}'s tail is reserved ({truncated.reserved} in rem_total_token_offset)"
    return f"{asks}; {check}"


def _fix_refuses(
    r: Row, need: int, rem_total: int, truncated: Tail, refused: frozenset[str] | None
) -> bool:
    """Whether the fix, with the tail reserved, refuses this request: its own ledger's
    answer when it ran; else its memory check with the tail's need taken off."""
    if refused is not None:
        return r.rid in refused
    hidden = truncated.tail_need
    return hidden is not None and need >= rem_total - hidden


def _admission_words(
    r: Row, page: int | None, piece_len: int | None, words: list[str]
) -> Tail | None:
    """``add_one_req``: admitted whole, truncated or refused; the request if truncated."""
    dec, chunk, need = r.decision, r.rem_chunk_tokens, r.need
    if dec == Decision.FULL:
        cp = _n(chunk) - _n(r.rem_chunk_after)  # the chunk budget it spent: its paged length
        fit = f"{piece_len} ({'one page: ' if cp == page else ''}{cp} ≤ {chunk} left)"
        s = f"admitted whole, computes {fit}"
        if r.load_back:
            s += f" but loads back {r.load_back} at once (slots allocated now, no chunk budget)"
        words.append(s)
    elif dec == Decision.TRUNCATED:
        seq, end, raw = _n(r.seq_len), _n(r.end), _n(r.unaligned_end)
        prefix = (r.device_prefix or 0) + (r.host_hit or 0)
        how = f"end {prefix} + {raw - prefix} = {raw}" + (
            f" aligned down to {end}" if raw != end else ""
        )
        s = f"{seq - prefix} to compute > {chunk} of chunk budget: truncated, {how}; piece {piece_len}"
        if r.load_back:
            s += f"; loads back {r.load_back}"
        tail = seq - end
        res = r.reserved_tail or 0
        s += f"; tail [{end}, {seq}) = {tail} " + (
            f"reserved ({res} into rem_total_token_offset)" if res else "not reserved"
        )
        words.append(s)
        return Tail(r.rid, tail, res, r.tail_need)
    elif dec == Decision.REJECTED:
        extra = "no load-back" if r.host_hit else "nothing allocated"
        reason = f" ({r.reason})" if r.reason and need is None else ""
        words.append(f"refused with {r.budget_state}, {extra}{reason}")
    return None


def _n(value: int | None) -> int:
    """A number the ledger always holds for this kind of step."""
    if value is None:
        raise ValueError("a ledger step lacks a number its decision always has")
    return value


def _allocate_step(r: Row) -> Step:
    if r.budget_state == BudgetState.OOM:
        values = Cells(
            step=r.step, call=Call.ALLOCATE, rid=r.rid, baseline=r.baseline,
            budget_state=r.budget_state, decision=BudgetState.OOM,
        )  # fmt: skip
        s = f"allocation fails: {r.reason or 'out of memory'} {r.baseline} available: out of memory"
    else:
        values = Cells(
            step=r.step, call=Call.ALLOCATE, rid=r.rid, baseline=r.baseline,
            budget_state=r.budget_state, piece=f"[{r.start}, {r.end}) {_n(r.end) - _n(r.start)}",
        )  # fmt: skip
        s = (
            f"allocate {r.allocated} slots for {r.rid} [{r.start}, {r.end}); "
            f"baseline after the batch {r.baseline_after}"
        )
    return Step(values, s + ".")
