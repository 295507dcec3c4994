"""report.md for a log replay, as a postmortem section: what happened in the order it
happened, what the fix changes and costs, what it does not cover, then the evidence.

Every number is either quoted from the log (with its ``file:line``) or says that it is
derived (arithmetic on logged numbers, and which) or inferred (a model rule applied to
evidence). Nothing here computes an admission rule: the numbers come from the rebuilt
rounds, the replay's root cause and the policies' ledgers."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl

from kvforensics.causes.oom import oom_words
from kvforensics.causes.tail import RootCause, held_root_cause
from kvforensics.model import RunResult
from kvforensics.model.policies import AS_RAN
from kvforensics.replay import ReplayResult
from kvforensics.replay.costs import CostReading
from kvforensics.replay.verdict import FirstTokenDelay
from kvforensics.report import _fmt
from kvforensics.rounds.ranks import describe_rank
from kvforensics.rounds.records import Contradiction, Decision, Round

#: what each fix leaves open, in the model's terms (the policies are `model/policies.py`)
LIMITS = {
    "fixed": [
        "A request that computes little but loads back much still gets in whenever its "
        "memory check passes: the chunk budget does not limit load-backs, only the memory "
        "check does, and that check is only as good as the offsets it subtracts.",
        "Only the deciding rank's books change; the other ranks replay its plan.",
        "It does not help when the memory is simply gone (the pool is full of requests "
        "in KV transfer or of cache that cannot be evicted): those causes need a smaller "
        "batch, a larger pool or faster transfers.",
    ],
    "drain": [
        "It ends the round at every truncation, so every request behind a chunked one "
        "waits a round, and the chunk budget left after the truncation goes unused.",
        "Like `fixed`, it does nothing against a pool that is full for other reasons.",
    ],
    "park": [
        "As `fixed`, and a resumed chunk with no memory left waits instead of being "
        "forced: that request's first token waits for KV transfers to give memory back.",
        "Like `fixed`, it does nothing against a pool that is full for other reasons.",
    ],
    "upstream": [
        "It drops the checkpoint alignment the fork needs for its checkpoints. The tail is "
        "still not reserved: it is safe here only because no request is looked at after a "
        "truncation that spends the whole chunk budget.",
    ],
}


def _file(where: str) -> tuple[str, int]:
    name, _, line = where.rpartition(":")
    return name, int(line)


def line_after(events: pl.DataFrame, where: str | None, kind: str, rid: str) -> str | None:
    """``file:line`` of the first ``kind`` line of ``rid`` after ``where`` (same file)."""
    if where is None:
        return None
    name, line = _file(where)
    hit = events.filter(
        (pl.col("kind") == kind)
        & (pl.col("rid") == rid)
        & (pl.col("line") > line)
        & pl.col("file").str.ends_with(name)
    ).sort("line")
    return f"{name}:{hit['line'][0]}" if hit.height else None


def title(rr: ReplayResult) -> str:
    source = describe_rank(rr.events, rr.rebuild.rank, names_only=True)
    o = rr.rebuild.oom
    if o:
        when = f", {o.time}" if o.time else ""
        return f"Prefill KV out of memory on {source}{when}: {o.rid}"
    return f"Replay of {source}: no out of memory"


def _n(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _ref(where: str | None) -> str:
    return f" ({where})" if where else ""


def summary(rr: ReplayResult, names: list[str]) -> list[str]:
    fid, o = rr.fidelity, rr.rebuild.oom
    out = []
    if o:
        out.append(
            f"{oom_words(o.tokens, o.available, rid=o.rid, form='with')} "
            f"in round {o.round}{_ref(o.where)}."
        )
    held = [c for c in rr.causes if c.held]
    if held:
        out.append("Cause: " + "; ".join(f"{c.summary} (`{c.id}`)" for c in held) + ".")
    rep = {True: "reproduces it", False: "does **not** reproduce it", None: ""}[rr.reproduced]
    out.append(
        f"Re-run under `prefix` (the code as it ran), {_n(fid.rounds_checked, 'logged round')} "
        f"agree with the log in {'every' if not fid.mismatches else 'all but'} "
        f"decision, offset and piece ({len(fid.mismatches)} mismatches)"
        + (f"; the replay forward from round {rr.start_round} {rep}." if rep else ".")
    )
    fates = []
    for p in names:
        if p == AS_RAN or p not in rr.results:
            continue
        r = rr.results[p].oom
        fates.append(
            f"`{p}`: " + (f"out of memory in round {r.round}" if r else "no out of memory")
        )
    if fates:
        out.append("From the same state: " + "; ".join(fates) + ".")
    return [" ".join(out), ""]


def _decisions(rr: ReplayResult, rc: RootCause) -> tuple[Round, dict[str, Decision]]:
    rnd = rr.rebuild.round_at(rc.round)
    if rnd is None:  # the root cause's round is one the replay kept (it is pinned)
        raise ValueError(f"round {rc.round} of the root cause is not among the rebuilt rounds")
    by = {d.rid: d for d in rnd.decisions}
    return rnd, by


def admission(rr: ReplayResult, rc: RootCause) -> list[str]:
    """1. the admission check of the request that later ran out of memory."""
    rnd, by = _decisions(rr, rc)
    v = by.get(rc.victim_rid)
    when = f", {rnd.time}" if rnd.time else ""
    out = [f"### 1. The admission check (round {rnd.index}{when})", ""]
    order = ", ".join(f"{d.rid} ({d.seq_len} tokens)" for d in rnd.decisions)
    out.append(
        f"The adder of {rr.rebuild.rank or 'the deciding rank'} looked at "
        f"{len(rnd.decisions)} request{'s' if len(rnd.decisions) != 1 else ''} in this order: {order}"
        f"{_ref(rnd.decisions[0].where if rnd.decisions else None)}."
    )
    if v is not None:
        out.append(
            f"{v.rid} had {v.seq_len} tokens, {v.prefix_len} of them in the device cache and "
            f"{v.host_hit_len} more in the host cache; its memory check ran against "
            f"rem_total_tokens {v.rem_total_tokens} ({v.where}) and passed. The host hit is "
            f"loaded back at admission: {v.loaded} tokens"
            f"{_ref(line_after(rr.events, v.where, 'hicache_load_back', v.rid))}."
        )
    return [*out[:2], " ".join(out[2:]), ""]


def truncation(rr: ReplayResult, rc: RootCause) -> list[str]:
    """2. its truncation, and the chunk budget the alignment left over."""
    rnd, by = _decisions(rr, rc)
    v = by.get(rc.victim_rid)
    i = rnd.decisions.index(v) if v is not None else -1
    nxt = rnd.decisions[i + 1] if 0 <= i < len(rnd.decisions) - 1 else None
    start, end = rc.victim_piece
    res = line_after(rr.events, v.where, "adder_result", v.rid) if v else None
    align = rr.rebuild.align_prov
    text = (
        f"With {v.rem_chunk_tokens if v else '?'} tokens of chunk budget left{_ref(v.where if v else None)}, "
        f"{rc.victim_rid} was truncated to [{start}, {end}){_ref(res)}. The "
        f"{rc.align_size}-token checkpoint alignment"
        f"{_ref(', '.join(align.evidence) if align and align.evidence else None)} cut the "
        f"piece from {rc.unaligned_piece} (derived: the budget in whole pages) to "
        f"{rc.aligned_piece}, leaving {rc.leftover_chunk_budget} tokens of chunk budget "
        f"for the requests after it"
        + (
            f" (rem_chunk_tokens={nxt.rem_chunk_tokens} at the next check, {nxt.where})"
            if nxt
            else " (derived)"
        )
        + f". Its tail [{end}, "
        f"{rc.victim_seq_len}), {rc.unreserved_tail} tokens (derived: {rc.victim_seq_len} - "
        f"{end}), was not charged to rem_total_token_offset: nothing in the books promised "
        "that memory to it."
    )
    return ["### 2. The truncation and the alignment gap", "", text, ""]


def intruder(rr: ReplayResult, rc: RootCause) -> list[str]:
    """3. the request that came through the gap, and what its load-back took."""
    if not rc.intruder_rid:
        return []
    _, by = _decisions(rr, rc)
    c = by.get(rc.intruder_rid)
    where = c.where if c else None
    res = line_after(rr.events, where, "adder_result", c.rid) if c else None
    load = line_after(rr.events, where, "hicache_load_back", c.rid) if c else None
    text = (
        f"{rc.intruder_rid} ({c.seq_len if c else '?'} tokens, {c.host_hit_len if c else '?'} "
        f"of them in the host cache) computes only {rc.intruder_compute} tokens{_ref(res)}, "
        f"{rc.intruder_compute_paged} in whole pages (derived), within the "
        f"{rc.leftover_chunk_budget} left. Its memory check asked for "
        f"{rc.intruder_need} (derived: prompt not in the device cache, plus the first token "
        f"and a page) against rem_total_tokens {rc.intruder_rem_total_tokens}{_ref(where)}: "
        f"it passed only because the tail was not reserved"
        + (
            f" (baseline {c.baseline} - rem_total_tokens {c.rem_total_tokens} = "
            f"{c.baseline - c.rem_total_tokens} already promised, derived, with nothing for "
            "the tail)"
            if c
            else ""
        )
        + f". Admitted whole, it loaded back {rc.intruder_load_back} tokens at once"
        f"{_ref(load)}: that is the memory the tail needed."
    )
    return ["### 3. Who came through the gap, and its load-back", "", text, ""]


def pieces_after(rr: ReplayResult, rc: RootCause) -> list[str]:
    """4. the victim's later pieces, each with how it was rebuilt."""
    rid = rc.victim_rid
    later = [(r, p) for r in rr.rebuild.rounds[rc.round + 1 :] for p in r.pieces if p.rid == rid]
    if not later:
        return []
    out = ["### 4. The pieces that followed", ""]
    out.append(
        "The rounds after it printed no adder line (the fork logs nothing for a resumed "
        "chunk), so each piece is rebuilt from other evidence:"
    )
    out.append("")
    for r, p in later:
        how = p.provenance + (", cross-checked against another rank" if p.cross_checked else "")
        when = f" ({r.time.time()})" if r.time else ""
        out.append(
            f"- round {r.index}{when}: [{p.start}, {p.end}), {p.end - p.start} tokens, {how}: "
            + "; ".join(p.evidence)
        )
    total = sum(p.end - p.start for _, p in later)
    if total == rc.unreserved_tail:
        parts = " + ".join(str(p.end - p.start) for _, p in later)
        out += ["", f"{parts} = {total} (derived): exactly the tail nobody reserved."]
    out.append("")
    return out


def out_of_memory(rr: ReplayResult, rc: RootCause) -> list[str]:
    """5. the allocation that failed, and what the pool held by then."""
    o = rr.rebuild.oom
    if not o:
        return []
    after = _decisions(rr, rc)[0].baseline_end
    text = (
        f"In round {o.round}{' (' + o.time + ')' if o.time else ''} "
        f"{oom_words(o.tokens, o.available, rid=o.rid, form='with')} "
        f"(free {o.available_size}, evictable {o.evictable_size}; "
        f"{o.where})."
    )
    if after is not None:
        text += (
            f" Round {rc.round} had left {after.value} slots ({after.provenance}: "
            f"{'; '.join(after.evidence)}) for a tail of {rc.unreserved_tail}."
        )
    pre = rr.results.get(AS_RAN)
    if pre is not None and pre.oom is not None:
        text += (
            f" The replay under `prefix` fails at the same allocation: round {pre.oom.round}, "
            f"{oom_words(pre.oom.tokens, pre.oom.available)}"
            + (" (reproduced)." if rr.reproduced else " (**not** the logged numbers).")
        )
    return ["### 5. The out of memory", "", text, ""]


def story(rr: ReplayResult, rc: RootCause | None) -> list[str]:
    """The events in the order they happened when the unreserved tail is the cause; for
    any other cause the catalogue's own story (`kvforensics.causes`)."""
    tail = rr.cause("unreserved_tail")
    if rc is None or (tail is not None and not tail.held):
        from kvforensics.replay import verdict_text

        lines = verdict_text(rc, rr.observed_oom, rr.results, rr.causes, rr.holds)
        return ["## What happened", "", *lines, ""]
    return [
        "## What happened",
        "",
        *admission(rr, rc),
        *truncation(rr, rc),
        *intruder(rr, rc),
        *pieces_after(rr, rc),
        *out_of_memory(rr, rc),
    ]


def _oom_cell(oom: tuple[int, str, int] | None) -> str:
    return "none" if oom is None else f"round {oom[0]}, {oom[1]}, {oom[2]} tokens"


def _outcome_row(p: str, res: RunResult) -> list[object]:
    o = res.oom
    left = sorted(r for r, q in res.requests.items() if q.finished_round is None)
    return [
        f"`{p}`",
        "none" if o is None else f"round {o.round}: {o.rid}, {oom_words(o.tokens, o.available)}",
        len(res.rounds),
        ", ".join(left) or "none",
    ]


def outcomes(rr: ReplayResult, names: list[str]) -> str:
    """Each policy from the start round: the same rows `replay` prints."""
    rows = [_outcome_row(p, rr.results[p]) for p in names if p in rr.results]
    return _fmt.md_table(["policy", "out of memory", "rounds run", "unfinished"], rows, right=(2,))


def _delay(d: FirstTokenDelay) -> str:
    if d.delay_s is None:
        if d.finished_round is not None and d.base_finished_round is None:
            return f"finishes in round {d.finished_round} (never under `prefix`)"
        return d.note or "-"
    return f"{d.delay_s:+.2f} s (round {d.base_finished_round} -> {d.finished_round})"


def _delay_table(r: CostReading) -> str:
    """One row per request whose first token moves under some policy, a column each."""
    pols = list(r.delays)
    rids = sorted({d.rid for ds in r.delays.values() for d in ds})
    if not rids:
        return "No request's first token moves."
    cell = {(p, d.rid): _delay(d) for p, ds in r.delays.items() for d in ds}
    rows = [[rid, *(cell.get((p, rid), "same") for p in pols)] for rid in rids]
    return _fmt.md_table(["request", *(f"`{p}`" for p in pols)], rows)


def costs(rr: ReplayResult, names: list[str], readings: Sequence[CostReading]) -> list[str]:
    out = ["## What the fix changes, and what it costs", ""]
    out += [
        f"Every policy re-run from round {rr.start_round} with the same requests and pool "
        "(`rounds run` counts rounds that completed; a round that ran out of memory is not one):",
        "",
        outcomes(rr, names),
        "",
    ]
    used = next((r for r in readings if r.used), None)
    if used is not None:
        out += [
            f"The cost is time: a request the fix holds back waits for memory that finishing "
            f"KV transfers give back. First tokens later than under `prefix`, with transfers "
            f"taking {used.seconds:.2f} s ({rr.transfer.how if rr.transfer else '-'}):",
            "",
        ]
        out += [_delay_table(used), ""]
    out += ["How the replay's clock was set (from `replay`):", ""]
    out += [f"- {a}" for a in rr.assumptions]
    out.append("")
    if len(readings) > 1:
        out += _alternatives(readings, names)
    return out


def _alternatives(readings: Sequence[CostReading], names: list[str]) -> list[str]:
    others = [p for p in names if p != AS_RAN]
    rows = []
    for r in readings:
        delays = "; ".join(
            f"`{p}` {d.rid} {d.delay_s:+.2f} s"
            for p in others
            for d in r.delays.get(p, [])
            if d.delay_s
        )
        fits = {True: "yes", False: "no: ruled out by the log", None: "-"}[r.reproduces]
        rows.append(
            [r.label, f"{r.seconds:.2f} s", fits, _oom_cell(r.ooms.get(AS_RAN)), delays or "none"]
        )
    return [
        "The same run under the other transfer times the log supports (re-run here; a "
        "reading under which `prefix` does not fail as logged is contradicted by the log):",
        "",
        _fmt.md_table(
            [
                "reading",
                "transfer",
                "prefix fails as logged",
                "prefix out of memory",
                "first tokens later",
            ],
            rows,
        ),
        "",
    ]


def limits(rr: ReplayResult, names: list[str]) -> list[str]:
    out = ["## What the fix does not cover", ""]
    for p in names:
        for text in LIMITS.get(p, []):
            out.append(f"- `{p}`: {text}")
    out += [
        "- The replay itself: the memory held by requests in KV transfer at the start round "
        "is split among them in equal shares, released one after another (assumed); the "
        "first-token delays above move with that and with the transfer time.",
        "",
    ]
    return out


def causes_table(rr: ReplayResult) -> list[str]:
    """Every cause the catalogue checked, held or not, with its evidence."""
    found = rr.causes
    if not found:
        return []
    said = {True: "held", False: "ruled out", None: "cannot tell"}
    rows = [[f"`{c.id}`", said[c.held], c.summary, "; ".join(c.evidence) or "-"] for c in found]
    return [
        "### Causes checked",
        "",
        _fmt.md_table(["cause", "verdict", "why", "evidence"], rows),
        "",
    ]


def evidence(rr: ReplayResult) -> list[str]:
    out = ["## Evidence", "", *causes_table(rr), "### Configuration", ""]
    rows: list[list[object]] = [
        [k, v.value, v.provenance, ", ".join(v.evidence) or "-"]
        for k, v in rr.rebuild.config.items()
    ]
    out += [_fmt.md_table(["setting", "value", "how known", "evidence"], rows, right=(1,)), ""]
    start = max(0, (rr.start_round or 0) - 1)
    rows = [
        [
            r.index,
            str(r.time.time()) if r.time else "-",
            f"{p.rid} [{p.start}, {p.end})",
            p.provenance + (", cross-checked" if p.cross_checked else ""),
            "; ".join(p.evidence),
        ]
        for r in rr.rebuild.rounds[start:]
        for p in r.pieces
    ]
    out += ["### Rebuilt rounds from the log", ""]
    out += [
        _fmt.md_table(["round", "time", "piece", "how known", "evidence"], rows, right=(0,)),
        "",
    ]
    fid = rr.fidelity
    out += ["### Fidelity under `prefix`", ""]
    out.append(f"{fid.rounds_checked} logged rounds re-run; {len(fid.mismatches)} mismatches.")
    if fid.mismatches:
        rows = [
            [m.round, m.rid, m.field, m.logged, m.model, m.where if m.where is not None else ""]
            for m in fid.mismatches[:20]
        ]
        out += ["", _fmt.md_table(["round", "request", "field", "logged", "model", "where"], rows)]
    out += ["", "### Contradictions in the evidence", ""]
    cs = rr.rebuild.contradictions
    out += [f"- {_round_of(c)}{c.what}: {c.detail}" for c in cs[:20]] or ["No contradictions."]
    out.append("")
    return out


def _round_of(c: Contradiction) -> str:
    return f"round {c.round}: " if c.round is not None else ""


def inputs_line(paths: list[Path]) -> str:
    return "Read from: " + ", ".join(f"`{p.name}`" for p in paths) + "."


#: rounds of logged history drawn before the replay's first round
HISTORY_ROUNDS = 12


def history(rr: ReplayResult, rounds: int) -> list[tuple[int, int]]:
    """(round, slots in use after it) for the logged rounds before the replay's first:
    the pool size minus what each round left free or evictable (derived)."""
    if rr.start_round is None:
        return []
    size = rr.rebuild.cfg.pool_size
    before = rr.rebuild.rounds[max(0, rr.start_round - rounds) : rr.start_round]
    return [
        (r.index, size - r.baseline_end.value)
        for r in before
        if r.baseline_end is not None and r.baseline_end.value is not None
    ]


def log_report(
    rr: ReplayResult, names: list[str], paths: list[Path]
) -> tuple[str, list[str], list[str]]:
    """(title, story, evidence) of the report on a log replay (its cost re-runs:
    ``ReplayOptions.costs``)."""
    rc = held_root_cause(rr.causes)
    head = [inputs_line(paths), "", "## Summary", "", *summary(rr, names)]
    head += story(rr, rc)
    head += costs(rr, names, rr.costs)
    head += limits(rr, names)
    return title(rr), head, evidence(rr)
