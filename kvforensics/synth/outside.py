"""A node that runs out of memory with no gap: something outside the adder (a decode
retraction, a leak) takes slots between two rounds while a long request is half done.
The long request's pieces spend the whole chunk budget, so nothing is admitted after
its truncations; a short request waits and is refused every round (its check lines give
the observed baseline of each round)."""

from __future__ import annotations

from pathlib import Path

from kvforensics.model import Config, Inflight, PagePool, PrefillNode, Request, Timing, get_policy
from kvforensics.synth.capture import Capture, capture_run
from kvforensics.synth.clock import Clock
from kvforensics.synth.ranks import pp0_lines, pp3_lines
from kvforensics.synth.sink import write_log
from kvforensics.synth.startup import startup_lines

START = "2026-11-02 12:40:00"
CFG = Config(
    page_size=64,
    align_size=256,
    chunked_prefill_size=16384,
    max_prefill_tokens=16384,
    max_new_tokens=1,
    pool_size=262144,
)
FREE = 70016
#: taken from the pool after this many rounds, and how much
OUTSIDE_AFTER, OUTSIDE_TOKENS = 2, 15040


def outside_node(policy: str = "prefix") -> PrefillNode:
    pool = PagePool(page_size=CFG.page_size, size=CFG.pool_size, free=FREE)
    pool.held["sending"] = CFG.pool_size - FREE
    return PrefillNode(
        CFG,
        get_policy(policy),
        pool,
        waiting=[Request("ox-long-000001", 60000), Request("ox-short-00002", 900)],
        inflight=[Inflight("sending", 60.0)],
        timing=Timing(round_overhead_s=1.0),
    )


def outside_capture() -> Capture:
    node = outside_node()
    first = capture_run(node, max_rounds=OUTSIDE_AFTER)
    node.pool.alloc("outside", 0, OUTSIDE_TOKENS, op="outside")
    rest = capture_run(node)
    if rest.oom is None:
        raise RuntimeError("the outside allocation did not end in an out-of-memory")
    rest.rounds[:0] = first.rounds
    return rest


def write_outside_node(out: Path) -> list[Path]:
    cap, clock = outside_capture(), Clock.at(START)
    paths = [out / "pp0.log", out / "pp3.log"]
    write_log(paths[0], [*startup_lines(cap.cfg, "PP0"), *pp0_lines(cap, clock)])
    write_log(paths[1], [*startup_lines(cap.cfg, "PP3"), *pp3_lines(cap, clock)])
    return paths
