"""One adder round per link of the chain, as a unit test drives it: the state the round
starts from, the calls in order, and what each gives under ``prefix`` (the code as it
ran) and under the fix. Every round here is run through the model on both sides; a link
whose round does not show the gap closing under the fix is left out, with the reason."""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from kvforensics.model import PrefillNode
from kvforensics.model.policies import AS_RAN
from kvforensics.model.sizing import ceil_page, memory_need, resumed_piece, tail_need
from kvforensics.reproduce.case import Ask, Case, from_node
from kvforensics.reproduce.chain import Chain, always

RESUMED = "test_resumed_chunk_tail_blocks_waiting_admission"


class Call(NamedTuple):
    """One adder call and what it gave."""

    call: str  # add_chunked_req | add_one_req
    rid: str
    decision: str  # resumed | full | truncated | rejected
    start: int | None
    end: int | None
    result: str  # budget_state() after the call (what add_one_req returns)
    load_back: int


class RoundSpec(NamedTuple):
    """The state one round starts from: the pool, the chunk it resumes, the queue."""

    free: int
    evictable: int
    chunked: tuple[str, int, int] | None  # (rid, seq_len, start)
    queue: tuple[Ask, ...]


class LinkTest(NamedTuple):
    name: str  # the test function
    what: str  # what it holds, in words
    spec: RoundSpec
    before: tuple[Call, ...]  # under prefix
    after: tuple[Call, ...]  # under the fix
    victim: str
    intruder: str
    derived: bool  # True: a round of the reproducer's own run; False: built around it


def state_at(case: Case, rnd: int) -> Case:
    """The case as it stands when round ``rnd`` of its ``prefix`` run begins."""
    node = case.node(AS_RAN)
    while node.round < rnd:
        node.step()
    return from_node(node, case.name)


def one_round(case: Case, spec: RoundSpec, policy: str) -> tuple[Call, ...]:
    """The adder calls of one round from ``spec`` under ``policy`` (the case's sizes and
    profile)."""
    node = _node(case, spec, policy)
    steps = node.batch().adder.steps
    return tuple(Call(always(s.call), always(s.rid), always(s.decision), s.start, s.end,
                      always(s.budget_state), s.load_back or 0) for s in steps)  # fmt: skip


def _node(case: Case, spec: RoundSpec, policy: str) -> PrefillNode:
    chunked = None
    if spec.chunked is not None:
        rid, seq, _ = spec.chunked
        chunked = Ask(rid, seq)
    sub = replace(case, free=spec.free, evictable=spec.evictable, waiting=spec.queue,
                  arrivals=(), inflight=(), outside=(), chunked=chunked,
                  chunked_done=spec.chunked[2] if spec.chunked else 0)  # fmt: skip
    return sub.node(policy)


def admitted(calls: tuple[Call, ...], rid: str) -> bool:
    return any(c.rid == rid and c.decision in ("full", "truncated", "resumed") for c in calls)


def chain_round(case: Case, chain: Chain, fix: str) -> LinkTest | str:
    """The round where the intruder came through the gap, as the reproducer ran it."""
    lk = chain.truncation()
    st = state_at(case, lk.round)
    node = case.node(AS_RAN)
    rows = [s for s in node.run(lk.round + 1).ledger.rows if s.round == lk.round]
    order = [always(s.rid) for s in rows if s.call == "add_one_req"]
    upto = order[: order.index(lk.intruder) + 1]
    by_rid = {a.rid: a for a in st.waiting}
    chunked = None
    if st.chunked is not None:
        chunked = (st.chunked.rid, st.chunked.seq_len, st.chunked_done)
    spec = RoundSpec(_whole_pages(st.free, case.page), st.evictable, chunked,
                     tuple(by_rid[r] for r in upto))  # fmt: skip
    return _checked(case, spec, fix, lk.victim, lk.call == "add_chunked_req", derived=True)


def _whole_pages(free: int, page: int) -> int:
    # SGLang's paged allocator counts whole free pages: the round is given as it has them
    return free // page * page


def _checked(
    case: Case, spec: RoundSpec, fix: str, victim: str, resumed: bool, derived: bool
) -> LinkTest | str:
    """The link's test when ``spec``'s last queued request gets in under ``prefix`` and not
    under ``fix`` (``resumed``: the gap is a resumed piece's), else why not."""
    before, after = one_round(case, spec, AS_RAN), one_round(case, spec, fix)
    intruder = spec.queue[-1].rid
    if not admitted(before, intruder):
        return f"{intruder} is not admitted under prefix from this round's state"
    if admitted(after, intruder):
        return f"{intruder} is admitted under {fix} too from this round's state"
    loads = any(a.host_hit_len for a in spec.queue if a.rid == intruder)
    if resumed:
        name = RESUMED
        what = f"{victim}'s resumed piece is still truncated: its tail keeps {intruder} out"
    else:
        name = (
            f"test_truncated_req_tail_blocks_{'host_load_back' if loads else 'waiting'}_admission"
        )
        what = f"after {victim}'s truncation {intruder} is refused"
    what += " and init_load_back is never called" if loads else ""
    return LinkTest(name, what, spec, before, after, victim, intruder, derived)


def resumed_round(case: Case, chain: Chain, fix: str) -> LinkTest | str:
    """The fix's other path, built around the chain's victim when its own run has no such
    round: the victim resumed and still truncated after this piece, with an ordinary
    one-token request waiting, and the fewest free slots that let that request in under
    ``prefix``. Tried in order: the victim's own length, then one and two chunks longer
    (a short tail leaves no resumed truncation); the end of its truncated piece, then every
    page as the start. The page arithmetic picks the candidates, the model confirms one."""
    lk = chain.truncation()
    page, chunk = case.page, case.size("chunked_prefill_size")
    for seq in (lk.seq_len, lk.seq_len + chunk, lk.seq_len + 2 * chunk):
        for start in dict.fromkeys([lk.piece[1], *range(page, seq, page)]):
            for free in _frees(case, seq, start):
                spec = RoundSpec(free, 0, (lk.victim, seq, start), (Ask("waiting", 1),))
                got = _checked(case, spec, fix, lk.victim, resumed=True, derived=False)
                if isinstance(got, LinkTest):
                    return got
    return "no resumed piece of the victim leaves chunk budget and memory for a waiting request"


def _frees(case: Case, seq: int, start: int) -> list[int]:
    """Free slots (whole pages) with which the piece resumed at ``start`` leaves chunk
    budget and memory for a one-token request under ``prefix`` but not once its tail is
    reserved (the arithmetic of ``sizing``; at most one per way the piece is sized)."""
    page, chunk = case.page, case.size("chunked_prefill_size")
    m, align = case.size("max_new_tokens"), case.size("align_size")
    need = memory_need(1, m, page)
    out = []
    by_chunk = ceil_page(need + 1 + ceil_page(chunk, page) + page, page)
    for free in (by_chunk, *range(page, chunk, page)):
        size = resumed_piece(start, seq, chunk, free, align)
        paged = ceil_page(size.end - start, page)
        left = free - paged - page
        if not size.truncated or chunk - paged < page or need >= left:
            continue
        if paged >= case.size("max_prefill_tokens"):
            continue
        if need >= left - tail_need(seq - size.end, page, m):
            out.append(free)
            if len(out) == 2:
                break
    return out
