"""Greedy, deterministic shrinking of a case (delta debugging on its parts and numbers).

Every candidate is re-run through the model (``chain.find_chain``) and kept only when it
shows the same chain (``Chain.shape``). Passes, repeated until none changes anything:
drop whole parts (transfers, arrivals, outside allocations, requests, the resumed
chunk), halve every size at once, then lower each number alone, largest cut first.
The order of parts and candidates is fixed, so the same input gives the same result."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import NamedTuple

from kvforensics.errors import InputError
from kvforensics.model.policies import AS_RAN
from kvforensics.reproduce.case import Ask, Case
from kvforensics.reproduce.chain import Chain, find_chain

#: outer passes at most (each pass that changes nothing ends the shrinking)
MAX_PASSES = 12


class Tried(NamedTuple):
    """One reduction: what it changed, whether it was kept, and if not, why."""

    what: str
    kept: bool
    why: str = ""


@dataclass(frozen=True, slots=True)
class Shrunk:
    case: Case
    chain: Chain
    original: Case
    tried: tuple[Tried, ...]
    seconds: float

    def held_back(self) -> list[Tried]:
        """For each size that could not go lower, the nearest lower value refused, and why."""
        now = dict(self.case.sizes) | {"free": self.case.free, "evictable": self.case.evictable}
        best: dict[str, tuple[int, Tried]] = {}
        for t in self.tried:
            key, _, change = t.what.partition(" ")
            if t.kept or key not in now or " -> " not in change:
                continue
            was, to = (int(x) for x in change.split(" -> "))
            if was == now[key] and to > best.get(key, (-1, t))[0]:
                best[key] = (to, t)
        return [t for _, t in best.values()]


class Shrinker:
    def __init__(self, case: Case, fix: str):
        self.fix = fix
        chain = find_chain(case, fix)
        if chain is None:
            raise InputError(f"{case.name}: {why_not(case, fix)}")
        self.shape = chain.shape()
        self.case, self.chain = case, chain
        self.tried: list[Tried] = []

    def attempt(self, what: str, cand: Case | None) -> bool:
        """Keep ``cand`` when it shows the same chain; record the attempt either way."""
        if cand is None or cand == self.case:
            return False
        try:
            chain = find_chain(cand, self.fix)
        except InputError as exc:
            self.tried.append(Tried(what, False, f"not a valid scenario ({exc})"))
            return False
        if chain is None or chain.shape() != self.shape:
            why = why_not(cand, self.fix) if chain is None else "the chain changed"
            self.tried.append(Tried(what, False, why))
            return False
        self.tried.append(Tried(what, True))
        self.case, self.chain = cand, chain
        return True

    def run(self) -> Shrunk:
        t0, original = time.perf_counter(), self.case
        for _ in range(MAX_PASSES):
            before = self.case
            self._drops()
            while self.attempt("sizes/2", halved(self.case)):
                pass
            for label, get, put, lo, step in knobs(self.case):
                self._lower(label, get, put, lo, step)
            if self.case == before:
                break
        return Shrunk(self.case, self.chain, original, tuple(self.tried),
                      time.perf_counter() - t0)  # fmt: skip

    def _drops(self) -> None:
        c = self.case
        if c.inflight:
            self.attempt("drop every KV transfer", replace(c, inflight=()))
        for t in reversed(self.case.inflight):
            self.attempt(f"drop transfer {t.rid}",
                         replace(self.case, inflight=tuple(x for x in self.case.inflight if x != t)))  # fmt: skip
        if self.case.arrivals:
            queued = tuple(replace(a, arrival=0.0) for a in self.case.arrivals)
            self.attempt("arrivals waiting from the start",
                         replace(self.case, waiting=self.case.waiting + queued, arrivals=()))  # fmt: skip
        for a in reversed(self.case.arrivals):
            self.attempt(f"drop arrival {a.rid}",
                         replace(self.case, arrivals=tuple(x for x in self.case.arrivals if x != a)))  # fmt: skip
        for o in reversed(self.case.outside):
            self.attempt(f"drop outside allocation before round {o[0]}",
                         replace(self.case, outside=tuple(x for x in self.case.outside if x != o)))  # fmt: skip
        for w in reversed(self.case.waiting):
            self.attempt(f"drop request {w.rid}",
                         replace(self.case, waiting=tuple(x for x in self.case.waiting if x != w)))  # fmt: skip
        if self.case.chunked is not None:
            self.attempt(f"drop resumed chunk {self.case.chunked.rid}",
                         replace(self.case, chunked=None, chunked_done=0))  # fmt: skip

    def _lower(self, label: str, get: Get, put: Put, lo: int, step: int) -> None:
        """Lower one number as far as the chain allows: the largest cut first."""
        while True:
            v = get(self.case)
            if v is None or v <= lo:
                return
            cands = candidates(v, lo, step) if step else halves(v, lo)
            if not any(self.attempt(f"{label} {v} -> {c}", _put(put, self.case, c))
                       for c in cands):  # fmt: skip
                return


def _put(put: Callable[[Case, int], Case | None], case: Case, v: int) -> Case | None:
    try:
        return put(case, v)
    except (ValueError, InputError):
        return None


def candidates(v: int, lo: int, step: int) -> Iterator[int]:
    """``lo``, then ``v`` less half, a quarter, ... of the way down to ``lo``, each rounded
    up to a multiple of ``step`` (and at least ``lo``); each value below ``v`` once."""
    if v <= lo:
        return
    yield lo
    seen = {lo}
    d = (v - lo) // 2
    while d > 0:
        c = max(lo, -(-(v - d) // step) * step)
        if c < v and c not in seen:
            seen.add(c)
            yield c
        d //= 2


def halves(v: int, lo: int) -> Iterator[int]:
    """``v`` halved while it stays whole and at least ``lo`` (step 0: powers of two)."""
    while v % 2 == 0 and v // 2 >= lo:
        v //= 2
        yield v


#: a number of a case, and the case with another value there (None: no such case)
Get = Callable[[Case], int | None]
Put = Callable[[Case, int], Case | None]
Knob = tuple[str, Get, Put, int, int]
#: a request of a case, and the case with another request there
GetAsk = Callable[[Case], Ask]
PutAsk = Callable[[Case, Ask], Case]


def knobs(case: Case) -> list[Knob]:
    """Every number of the case that may go lower: (label, get, put, lowest, step)."""
    page = case.page
    out: list[Knob] = []
    for i, a in enumerate(case.waiting):
        out += _ask_knobs(f"waiting[{a.rid}]", _get_waiting(i), _set_waiting(i), page)
    for i, a in enumerate(case.arrivals):
        out += _ask_knobs(f"arrivals[{a.rid}]", _get_arrival(i), _set_arrival(i), page)
    if case.chunked is not None:
        out.append(("chunked.done", lambda c: c.chunked_done,
                    lambda c, v: replace(c, chunked_done=v), case.chunked.prefix_len + 1, 1))  # fmt: skip
    out += [
        ("free", lambda c: c.free, lambda c, v: replace(c, free=v), 0, page),
        ("evictable", lambda c: c.evictable, lambda c, v: replace(c, evictable=v), 0, page),
    ]
    for i, t in enumerate(case.inflight):
        out.append((f"transfer[{t.rid}].tokens", _get_transfer(i),
                    _set_transfer(i), page, page))  # fmt: skip
    for i, (r, _) in enumerate(case.outside):
        out.append((f"outside[{r}].tokens", _get_outside(i),
                    _set_outside(i), page, page))  # fmt: skip
    for name in ("chunked_prefill_size", "max_prefill_tokens"):
        out.append((name, _get_size(name), _set_size(name), page, page))
    # Page and alignments go by halves: a node's are powers of two (page 64, FlashKDA 256)
    for name in ("align_size", "truncation_align_size"):
        if case.size(name):
            out.append((name, _get_size(name), _set_align(name), page, 0))
    out.append(("page_size", lambda c: c.page, _set_page, 1, 0))
    return out


def _ask_knobs(label: str, get: GetAsk, put: PutAsk, page: int) -> list[Knob]:
    return [
        (f"{label}.host_hit_len", lambda c: get(c).host_hit_len,
         lambda c, v: put(c, replace(get(c), host_hit_len=v)), 0, 1),
        (f"{label}.prefix_len", lambda c: get(c).prefix_len,
         lambda c, v: put(c, replace(get(c), prefix_len=v)), 0, 1),
        (f"{label}.seq_len", lambda c: get(c).seq_len,
         lambda c, v: put(c, replace(get(c), seq_len=v)), 1, 1),
    ]  # fmt: skip


def _get_waiting(i: int) -> GetAsk:
    return lambda c: c.waiting[i]


def _set_waiting(i: int) -> PutAsk:
    return lambda c, a: replace(c, waiting=(*c.waiting[:i], a, *c.waiting[i + 1 :]))


def _get_arrival(i: int) -> GetAsk:
    return lambda c: c.arrivals[i]


def _set_arrival(i: int) -> PutAsk:
    return lambda c, a: replace(c, arrivals=(*c.arrivals[:i], a, *c.arrivals[i + 1 :]))


def _get_transfer(i: int) -> Get:
    return lambda c: c.inflight[i].tokens


def _get_outside(i: int) -> Get:
    return lambda c: c.outside[i][1]


def _get_size(name: str) -> Get:
    return lambda c: c.size(name)


def _set_size(name: str) -> Put:
    return lambda c, v: c.with_sizes(**{name: v})


def _set_transfer(i: int) -> Put:
    def put(c: Case, v: int) -> Case:
        t = replace(c.inflight[i], tokens=v)
        return replace(c, inflight=(*c.inflight[:i], t, *c.inflight[i + 1 :]))

    return put


def _set_outside(i: int) -> Put:
    def put(c: Case, v: int) -> Case:
        o = (c.outside[i][0], v)
        return replace(c, outside=(*c.outside[:i], o, *c.outside[i + 1 :]))

    return put


def _set_align(name: str) -> Put:
    def put(c: Case, v: int) -> Case | None:
        return c.with_sizes(**{name: v}) if v % c.page == 0 else None

    return put


def _set_page(c: Case, v: int) -> Case | None:
    aligns = [c.size(n) for n in ("align_size", "truncation_align_size")]
    if any(a % v for a in aligns if a):
        return None
    return c.with_sizes(page_size=v)


def halved(c: Case) -> Case | None:
    """Every size and length of the case halved at once (page, aligns, budgets, pool,
    requests): the chain's proportions kept. None when a size is odd."""
    if (
        any(v % 2 for _, v in c.sizes if v and _ != "max_new_tokens")
        or c.free % 2
        or c.evictable % 2
    ):
        return None

    def ask(a: Ask) -> Ask:
        return replace(a, seq_len=max(1, a.seq_len // 2), prefix_len=a.prefix_len // 2,
                       host_hit_len=a.host_hit_len // 2)  # fmt: skip

    sizes = {k: (v if k == "max_new_tokens" else v // 2) for k, v in c.sizes}
    return replace(
        c.with_sizes(**sizes),
        free=c.free // 2,
        evictable=c.evictable // 2,
        waiting=tuple(ask(a) for a in c.waiting),
        arrivals=tuple(ask(a) for a in c.arrivals),
        chunked=ask(c.chunked) if c.chunked else None,
        chunked_done=c.chunked_done // 2,
        inflight=tuple(replace(t, tokens=t.tokens // 2) for t in c.inflight),
        outside=tuple((r, t // 2) for r, t in c.outside),
    )


def why_not(case: Case, fix: str) -> str:
    """Why ``case`` shows no chain, in words (the first link that is missing)."""
    from kvforensics.reproduce.chain import finished, run

    try:
        pre = run(case, AS_RAN)
    except InputError as exc:
        return f"not a valid scenario ({exc})"
    if pre.oom is None:
        return "no out-of-memory under prefix"
    if case.outside:
        return "it runs out of memory without the outside allocation too"
    if not finished(run(case, fix)):
        return f"{fix} does not finish every request without running out of memory"
    return "no request came through a truncation's leftover chunk budget that the fix refuses"
