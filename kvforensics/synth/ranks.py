"""One writer per PP rank role. Each yields full log lines (prefix included) in order.

* PP0 decides: the fork's adder lines, HiCache load-backs, AttentionStore writes and,
  at the end, the out-of-memory block.
* PP1 replays PP0's plan: one line per round that ran a batch.
* PP3 processes results: SGLang's ``Prefill batch`` line per round that ran a batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from kvforensics.synth import lines as L
from kvforensics.synth.capture import Capture, RoundCapture, number
from kvforensics.synth.clock import Clock
from kvforensics.synth.oom import oom_block, tree_dump

RidMap = Callable[[str], str]


def _same(rid: str) -> str:
    return rid


def _adder_lines(rc: RoundCapture, pre: str, rid: RidMap) -> Iterator[str]:
    # The fork logs add_one_req only; a resumed chunk (add_chunked_req) prints nothing.
    for s in rc.steps:
        if s.call != "add_one_req":
            continue
        assert s.rid is not None  # every add_one_req names its request
        name = rid(s.rid)
        yield pre + L.adder_check(s, name)
        if s.decision != "rejected" and s.host_hit:
            yield pre + L.load_back(name, s.host_hit, number(s.load_back))
        yield pre + L.adder_result(s, name)


def pp0_lines(
    cap: Capture, clock: Clock, *, rank: str = "PP0", rid: RidMap = _same, block_size: int = 256
) -> Iterator[str]:
    for rc in cap.rounds:
        yield from _adder_lines(rc, clock.prefix(rc.start, rank), rid)
        if block_size:
            post = clock.prefix(rc.end, rank)
            for r, s, e in rc.pieces:
                blocks = L.as_blocks(s, e, block_size)
                if blocks is not None:
                    yield post + L.as_write(rid(r), blocks, block_size)
    if cap.oom is not None and cap.oom_round is not None:
        rc = cap.oom_round
        pre = clock.prefix(rc.start, rank)
        yield from _adder_lines(rc, pre, rid)
        victim = cap.oom.rid
        held = next((s for r, s, _e in rc.pieces if r == victim), 0)
        prefix = next((number(s.device_prefix) for s in rc.steps if s.rid == victim), 0)
        tree = tree_dump(rid(victim), max(held - prefix, 0), prefix, cap.cfg.pool_size)
        yield from oom_block(cap.oom, pre, tree)


def pp1_lines(
    cap: Capture, clock: Clock, *, rank: str = "PP1", rid: RidMap = _same
) -> Iterator[str]:
    """Rounds with a batch, including those PP0 printed nothing for (resumed chunks only).
    The round that ran out of memory never reached the other ranks."""
    for rc in cap.rounds:
        if rc.pieces:
            names = [rid(r) for r, _s, _e in rc.pieces]
            yield clock.prefix(rc.start, rank) + L.replay_plan(names, rc.new_tokens)


def new_seq(rc: RoundCapture, *, count_resumed: bool = True) -> int:
    """``#new-seq``: SGLang prints ``len(can_run_list)``, and ``add_chunked_req`` puts the
    resumed request in that list too, so a resumed chunk counts as a sequence of the batch.
    ``count_resumed=False`` counts only newly admitted requests."""
    n = len(rc.admitted())
    if count_resumed:
        n += sum(1 for s in rc.steps if s.call == "add_chunked_req" and s.decision != "parked")
    return n


def pp3_lines(
    cap: Capture,
    clock: Clock,
    *,
    rank: str = "PP3",
    count_resumed: bool = True,
) -> Iterator[str]:
    size = cap.cfg.pool_size
    for rc in cap.rounds:
        if not rc.pieces:
            continue
        new_tokens = rc.new_tokens
        cached = sum(number(s.device_prefix) + number(s.load_back) for s in rc.admitted())
        used = size - (rc.available + rc.evictable)
        dur = rc.end - rc.start
        yield clock.prefix(rc.end, rank) + L.prefill_batch(
            new_seq=new_seq(rc, count_resumed=count_resumed),
            new_token=new_tokens,
            cached_token=cached,
            token_usage=used / size,
            queue_req=rc.queue_len,
            inflight_req=rc.inflight,
            throughput=new_tokens / dur if dur > 0 else 0.0,
        )
