"""The cause's chain in a case, read off the model's own ledgers: what a shrinking step
must keep for the reproducer to show "the same cause and crash".

Two kinds of chain are reduced:

* ``unreserved_tail``: under ``prefix`` a truncation (``add_one_req``, or a resumed
  ``add_chunked_req``) leaves chunk budget; a request that the fix refuses in the same
  round is admitted after it (the intruder); the truncated request later runs out of
  memory; under the fix nothing runs out and every request finishes.
* ``external_allocation``: something outside the adder takes slots before a round and
  the run then runs out of memory; without that allocation it does not. No adder change
  can guard it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple, TypeVar

from kvforensics.errors import InputError
from kvforensics.model import OutOfMemory, RunResult, Step
from kvforensics.model.policies import AS_RAN
from kvforensics.reproduce.case import Case

TAIL, OUTSIDE = "unreserved_tail", "external_allocation"
#: rounds a run of a candidate may take (a candidate that needs more is not kept)
MAX_ROUNDS = 2000

T = TypeVar("T")
#: (round, request) as the ledger holds them
_Key = tuple[int | None, str | None]


def always(value: T | None) -> T:
    """A ledger field that every step of the kind read holds (an adder step's round, step,
    request, lengths and budgets; an admitted piece's start and end). ``Step`` makes every
    field optional because an allocation's step has none of the adder's books."""
    assert value is not None
    return value


class Link(NamedTuple):
    """A truncation whose leftover chunk budget let a request in, and that request."""

    call: str  # add_one_req | add_chunked_req: the truncating call
    round: int
    victim: str
    piece: tuple[int, int]
    unaligned_end: int
    seq_len: int
    gap: int  # chunk budget left after the truncation
    intruder: str
    intruder_piece: tuple[int, int]
    load_back: int
    need: int
    rem_total_tokens: int  # what the intruder's memory check saw


class Chain(NamedTuple):
    kind: str
    oom: OutOfMemory
    link: Link | None  # None for an outside allocation
    outside: tuple[tuple[int, int], ...] = ()
    fix_oom: OutOfMemory | None = None

    def truncation(self) -> Link:
        """The truncation of an ``unreserved_tail`` chain (an outside allocation has none)."""
        assert self.link is not None
        return self.link

    def shape(self) -> tuple[Any, ...]:
        """What a reduction must keep: the kind, the truncating call, whether the intruder
        loads back, and that the truncated (or starved) request is the one that runs out."""
        if self.link is None:
            return (self.kind, self.oom.rid)
        lk = self.link
        return (self.kind, lk.call, lk.load_back > 0, self.oom.rid == lk.victim)


def run(case: Case, policy: str) -> RunResult:
    return case.node(policy).run(MAX_ROUNDS)


def finished(res: RunResult) -> bool:
    return res.oom is None and all(q.finished_round is not None for q in res.requests.values())


def find_chain(case: Case, fix: str) -> Chain | None:
    """The case's chain under ``prefix`` against ``fix``, or None when it shows neither."""
    try:
        pre = run(case, AS_RAN)
    except InputError:
        return None
    if pre.oom is None:
        return None
    if case.outside:
        return _outside_chain(case, pre, fix)
    fixed = run(case, fix)
    if not finished(fixed):
        return None
    link = find_link(pre, fixed)
    return Chain(TAIL, pre.oom, link) if link is not None else None


def _outside_chain(case: Case, pre: RunResult, fix: str) -> Chain | None:
    assert pre.oom is not None  # ``find_chain`` checks
    if run(replace(case, outside=()), AS_RAN).oom is not None:
        return None  # it runs out without the outside allocation too: not this cause
    return Chain(OUTSIDE, pre.oom, None, case.outside, run(case, fix).oom)


def find_link(pre: RunResult, fixed: RunResult) -> Link | None:
    """The first truncation of the request that ran out of memory that left chunk budget
    and let in a request the fix refuses in the same round (the detector of
    ``causes.tail`` on the model's ledger rows)."""
    assert pre.oom is not None  # ``find_chain`` checks
    victim, last = pre.oom.rid, pre.oom.round
    rows = [s for s in pre.ledger.rows if s.call in ("add_one_req", "add_chunked_req")]
    refused, seen = _refused_under(fixed), _seen(fixed)
    for t in rows:
        if not (
            t.rid == victim
            and always(t.round) <= last
            and _truncated(t)
            and always(t.rem_chunk_after) > 0
        ):
            continue
        for s in rows:
            later = s.round == t.round and always(s.step) > always(t.step)
            if (
                later
                and s.decision in ("full", "truncated")
                and ((s.round, s.rid) in refused or (s.round, s.rid) not in seen)
            ):
                return _link(t, s)
    return None


def _truncated(s: Step) -> bool:
    return s.decision in ("truncated", "resumed") and always(s.end) < always(s.seq_len)


def _refused_under(res: RunResult) -> set[_Key]:
    return {(s.round, s.rid) for s in res.ledger.rows if s.decision == "rejected"}


def _seen(res: RunResult) -> set[_Key]:
    return {(s.round, s.rid) for s in res.ledger.rows if s.call == "add_one_req"}


def _link(t: Step, s: Step) -> Link:
    end = always(t.end)
    return Link(
        always(t.call), always(t.round), always(t.rid), (always(t.start), end),
        t.unaligned_end or end, always(t.seq_len), always(t.rem_chunk_after), always(s.rid),
        (always(s.start), always(s.end)), s.load_back or 0, s.need or 0,
        always(s.rem_total_tokens),
    )  # fmt: skip
