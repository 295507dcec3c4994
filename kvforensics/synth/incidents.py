"""Synthesized incidents, one per cause of ``docs/causes.md``: a small model node set
up so that one mechanism ends in an out-of-memory, run under ``prefix`` and rendered as
the three ranks' logs. Tests replay the logs and check that the rebuild gives the pieces
as they ran, that this cause holds and the others do not, and the policy table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvforensics.model import Config, Inflight, PagePool, PrefillNode, Request, Timing, get_policy
from kvforensics.model.policies import AS_RAN
from kvforensics.model.profiles import get_profile
from kvforensics.synth.capture import Capture, capture_run
from kvforensics.synth.clock import Clock
from kvforensics.synth.ranks import pp0_lines, pp1_lines, pp3_lines
from kvforensics.synth.sink import write_log
from kvforensics.synth.startup import Startup, startup_lines

START = "2026-12-01 08:00:00"
STARTUP = Startup(args_time="2026-12-01 07:55:10", ready_time="2026-12-01 07:58:40")


@dataclass
class Incident:
    """A node that runs into one cause, and what its run did."""

    name: str
    #: the causes a replay of its logs must find held (all others not)
    holds: tuple[str, ...]
    cfg: Config
    build: Callable[[str], PrefillNode]
    victim: str
    #: policies that avoid the out-of-memory under the same facts
    avoided_by: tuple[str, ...]
    outside: dict[int, int] = field(default_factory=dict)
    capture: Capture | None = None
    #: the model profile it ran under (a replay gives it with ``--profile``); None: the fork
    profile: str | None = None

    def run(self) -> Capture:
        if self.capture is None:
            self.capture = capture_run(self.build(AS_RAN))
            if self.capture.oom is None:
                raise RuntimeError(f"{self.name}: the prefix run did not run out of memory")
        return self.capture

    def pieces(self, rid: str) -> list[tuple[int, int]]:
        """``rid``'s pieces as they ran under ``prefix``, the out-of-memory piece last."""
        cap = self.run()
        got = [(s, e) for rc in cap.rounds for r, s, e in rc.pieces if r == rid]
        assert cap.oom_round is not None  # ``run`` checks the run ran out of memory
        got += [(s, e) for r, s, e in cap.oom_round.pieces if r == rid]
        return got

    def write(self, out: Path) -> list[Path]:
        """The three ranks' logs (startup lines first) under ``out``."""
        cap, clock = self.run(), Clock.at(START)
        paths = []
        for rank, body in (
            ("PP0", pp0_lines(cap, clock)),
            ("PP1", pp1_lines(cap, clock)),
            ("PP3", pp3_lines(cap, clock)),
        ):
            path = out / f"{rank.lower()}.log"
            write_log(path, [*startup_lines(self.cfg, rank, STARTUP), *body])
            paths.append(path)
        return paths


def _held_pool(
    cfg: Config, free: int, senders: int, done_at: float, unevictable: int = 0
) -> tuple[PagePool, list[Any]]:
    """A pool with ``free`` slots (and ``unevictable`` cache); the rest held by ``senders``
    requests in KV transfer, which finish one a second from ``done_at``."""
    pool = PagePool(page_size=cfg.page_size, size=cfg.pool_size, free=free,
                    unevictable=unevictable, swa_size=cfg.swa_pool_size)
    share = (cfg.pool_size - free - unevictable) // senders // cfg.page_size * cfg.page_size
    flight = []
    for i in range(senders):
        pool.hold(f"sent-{i}", share)
        flight.append(Inflight(f"sent-{i}", done_at + i))
    return pool, flight


def external_allocation(
    *,
    page: int = 64,
    align: int = 256,
    chunk: int = 4096,
    free: int = 80000,
    victim_len: int = 60000,
    first: int = 1024,
    taken: int = 60032,
    at_round: int = 3,
) -> Incident:
    """The victim's truncation spends the whole chunk budget (``first`` + its piece fill
    it, its piece ends on an align boundary, nobody comes after it); ``taken`` slots go to
    something outside the adder before round ``at_round``; the victim's pieces shrink and
    the forced branch runs out of memory on a piece that is not its last."""
    cfg = Config(
        page_size=page,
        chunked_prefill_size=chunk,
        max_prefill_tokens=4 * chunk,
        pool_size=262144,
        align_size=align,
    )
    timing = Timing(round_overhead_s=1.0, transfer_latency_s=30.0)

    def build(policy: str) -> PrefillNode:
        pool, flight = _held_pool(cfg, free, 8, 30.0)
        waiting = [Request("as-first", first), Request("as-victim", victim_len)]
        return PrefillNode(
            cfg,
            get_policy(policy),
            pool,
            waiting=waiting,
            inflight=flight,
            timing=timing,
            outside={at_round: taken},
        )

    return Incident(
        "external_allocation",
        ("external_allocation", "forced_resume"),
        cfg,
        build,
        "as-victim",
        ("park",),
        {at_round: taken},
    )


def unreserved_tail(
    *, page: int = 64, align: int = 256, chunk: int = 4096, free: int = 12032
) -> Incident:
    """The postmortem's worked example (``docs/accounting.md``): A whole, B truncated with
    chunk budget left by the alignment, C (little to compute, much to load back) through
    the gap; B's later pieces run out of memory on its last."""
    cfg = Config(page_size=page, chunked_prefill_size=chunk, max_prefill_tokens=4 * chunk,
                 pool_size=65536, align_size=align)
    timing = Timing(round_overhead_s=1.0, transfer_latency_s=30.0)

    def build(policy: str) -> PrefillNode:
        pool, flight = _held_pool(cfg, free, 4, 30.0)
        waiting = [Request("as-a", 1088), Request("as-b", 8000),
                   Request("as-c", 6128, host_hit=6000)]
        return PrefillNode(cfg, get_policy(policy), pool, waiting=waiting, inflight=flight,
                           timing=timing)

    return Incident("unreserved_tail", ("unreserved_tail",), cfg, build, "as-b",
                    ("fixed", "upstream", "drain", "park"))


def late_gap(
    *, page: int = 64, align: int = 256, chunk: int = 4288, free: int = 16000,
    first: int = 1088, seq: int = 12000, host: int = 6000, compute: int = 150,
    arrival: float | None = None,
) -> Incident:
    """An unreserved tail whose gap is not the victim's first truncation. With a chunk
    that is not a multiple of ``align``, an aligned piece leaves chunk budget behind. In
    round 0 ``first`` runs whole and the victim is truncated after it, leaving less budget
    than the intruder's ``compute`` needs in whole pages: the intruder would be a second
    chunked request and is refused. In round 1 the victim's resumed piece leaves
    ``chunk % align`` tokens, enough: the intruder comes through and loads ``host`` tokens
    back, and the victim's last piece runs out of memory. ``arrival``: the intruder arrives
    then instead of waiting from the start."""
    cfg = Config(page_size=page, chunked_prefill_size=chunk, max_prefill_tokens=4 * chunk,
                 pool_size=65536, align_size=align)
    timing = Timing(round_overhead_s=1.0, transfer_latency_s=30.0)

    def build(policy: str) -> PrefillNode:
        pool, flight = _held_pool(cfg, free, 4, 30.0)
        intruder = Request("as-c", host + compute, host_hit=host, arrival=arrival or 0.0)
        waiting = [Request("as-a", first), Request("as-b", seq)]
        return PrefillNode(cfg, get_policy(policy), pool, inflight=flight, timing=timing,
                           waiting=waiting + ([] if arrival else [intruder]),
                           arrivals=[intruder] if arrival else [])

    return Incident("late_gap", ("unreserved_tail",), cfg, build, "as-b",
                    ("fixed", "upstream", "drain", "park"))


def late_arrival(
    *, page: int = 64, align: int = 256, chunk: int = 4288, free: int = 16000,
    first: int = 1088, seq: int = 12000, host: int = 6000, compute: int = 150,
) -> Incident:
    """``late_gap`` with an intruder that is not there yet when the victim is first
    truncated: it arrives between round 0 and round 1, so the round a forward run starts
    from never shows it, and it comes through the gap the victim's resumed piece leaves.
    Only a replay that keeps the arrival as a fact of the world runs into the
    out-of-memory."""
    inc = late_gap(page=page, align=align, chunk=chunk, free=free, first=first, seq=seq,
                   host=host, compute=compute, arrival=0.5)
    inc.name = "late_arrival"
    return inc


def page_granularity(
    *, page: int = 64, align: int = 256, chunk: int = 4096, free: int = 12000
) -> Incident:
    """The same chain as ``unreserved_tail`` on a pool whose free count is not whole pages
    (the fork counts slots as given, like the postmortem's "12000 free"): the victim's
    last, memory-sized piece needs one page more than is left, and the message shows
    ``N <= available``. Page granularity is where the out-of-memory surfaces, the
    unreserved tail is the link a policy breaks. (Alone it cannot happen on a single pool
    of whole pages under any profile: a memory check that passed covers the pages of
    every piece it admits; docs/causes.md, "Page granularity". ``swa_page_estimate`` is where it
    can.)"""
    inc = unreserved_tail(page=page, align=align, chunk=chunk, free=free)
    inc.name, inc.holds = "page_granularity", ("unreserved_tail", "page_granularity")
    return inc


def swa_page_estimate(
    *, page: int = 64, align: int = 256, chunk: int = 4160, prefill: int = 4224,
    free: int = 12160, seq: int = 12000, other: int = 100, release: str = "sglang-0.5.9",
) -> Incident:
    """Page granularity alone, under the hybrid SWA allocator of SGLang 0.5.9 and 0.5.10:
    ``alloc_extend`` wants ``extend_num_tokens`` plus a page per request free in both pools,
    while the adder's memory check counts no page (and 0.5.9's books charge none). The long
    request's checks pass on its tokens; in its last round its last piece and a short
    request (``other`` tokens; 0: none) fit the free slots in whole pages, but not with a
    page each on top: the message shows ``N <= available`` in both pools.

    The short request waits from the start: the checkpoint alignment leaves chunk budget
    after each of the long request's pieces (``chunk`` is not a multiple of ``align``), so
    the adder looks at it every round, and ``max_prefill_tokens`` (``prefill``) refuses it
    until the last piece is short. Under 0.5.10 the page its books charge each piece leaves
    the long request's last piece room, and the short request runs out alone in the next
    round, on its own page. The SWA pool is as large as the full one
    (``--swa-full-tokens-ratio 1``): the model's adder budgets the full pool, these
    releases' the smaller of the two, which then agree. No policy changes the last round:
    each runs out of memory the same."""
    cfg = Config(page_size=page, chunked_prefill_size=chunk, max_prefill_tokens=prefill,
                 pool_size=65536, align_size=align, swa_pool_size=65536)
    timing = Timing(round_overhead_s=1.0, transfer_latency_s=30.0)
    profile = get_profile(release)

    def build(policy: str) -> PrefillNode:
        pool, flight = _held_pool(cfg, free, 4, 30.0)
        waiting = [Request("as-long", seq)] + ([Request("as-short", other)] if other else [])
        return PrefillNode(cfg, get_policy(policy), pool, waiting=waiting, inflight=flight,
                           timing=timing, profile=profile)

    victim = "as-short" if other and profile.page_charge_per_request else "as-long"
    return Incident("swa_page_estimate", ("page_granularity",), cfg, build, victim, (),
                    profile=release)


def eviction_shortfall(
    *, page: int = 64, align: int = 256, chunk: int = 4096, free: int = 2048,
    stuck: int = 8192, seq: int = 6000,
) -> Incident:
    """Cache that the tree counts as evictable but that eviction cannot free (locked by
    requests in flight): the memory check passes on free + evictable, the allocation finds
    only the free part, and the message shows ``free < N <= free + evictable``."""
    cfg = Config(page_size=page, chunked_prefill_size=chunk, max_prefill_tokens=4 * chunk,
                 pool_size=65536, align_size=align)
    timing = Timing(round_overhead_s=1.0, transfer_latency_s=30.0)

    def build(policy: str) -> PrefillNode:
        pool, flight = _held_pool(cfg, free, 4, 30.0, unevictable=stuck)
        return PrefillNode(cfg, get_policy(policy), pool, waiting=[Request("as-big", seq)],
                           inflight=flight, timing=timing)

    return Incident("eviction_shortfall", ("eviction_shortfall",), cfg, build, "as-big", ())


def hybrid_pool(
    *, page: int = 64, align: int = 256, chunk: int = 4096, free: int = 29952,
    swa_short: int = 16384, seq: int = 20000, other: int = 1000,
) -> Incident:
    """A sliding-window model's second pool binds: the SWA pool, ``swa_short`` slots
    smaller than the full one, holds every token of pieces inside the window; the adder
    budgets the full pool only (SGLang's ``is_hybrid_swa``), so the long request is
    admitted and resumed while the full pool has room, until its next piece finds the SWA
    pool short. A second request, ``other`` tokens, runs whole before it. No policy budgets
    the SWA pool: each runs out of memory the same."""
    cfg = Config(page_size=page, chunked_prefill_size=chunk, max_prefill_tokens=4 * chunk,
                 pool_size=65536, align_size=align, swa_pool_size=65536 - swa_short)
    timing = Timing(round_overhead_s=1.0, transfer_latency_s=30.0)

    def build(policy: str) -> PrefillNode:
        pool, flight = _held_pool(cfg, free, 4, 30.0)
        waiting = [Request("as-short", other), Request("as-long", seq)]
        return PrefillNode(cfg, get_policy(policy), pool, waiting=waiting, inflight=flight,
                           timing=timing)

    return Incident("hybrid_pool", ("hybrid_pool",), cfg, build, "as-long", ())


INCIDENTS: dict[str, Callable[..., Incident]] = {
    "hybrid_pool": hybrid_pool,
    "eviction_shortfall": eviction_shortfall,
    "external_allocation": external_allocation,
    "unreserved_tail": unreserved_tail,
    "late_gap": late_gap,
    "late_arrival": late_arrival,
    "page_granularity": page_granularity,
    "swa_page_estimate": swa_page_estimate,
}
