"""Agent-like traffic on one healthy prefill node: long prompts that get truncated, and
between them many short turns whose long context sits in the host cache (a tool call's
result appended to a conversation). A truncation cut by the checkpoint alignment leaves
chunk budget, and the short turns come through it with large load-backs; with memory to
spare nothing runs out. Rendered as the PP0 and PP3 logs a healthy node writes.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from kvforensics.model.policies import AS_RAN
from kvforensics.scenario.loader import parse_scenario
from kvforensics.synth.capture import Capture, capture_run
from kvforensics.synth.clock import Clock
from kvforensics.synth.ranks import pp0_lines, pp3_lines
from kvforensics.synth.sink import write_log
from kvforensics.synth.startup import startup_lines

START = "2026-11-02 10:00:00"
CONFIG = {
    "page_size": 64,
    "align_size": 256,
    "chunked_prefill_size": 16384,
    "max_prefill_tokens": 16384,
    "max_new_tokens": 1,
    "pool_size": 262144,
}
TIMING = {
    "round_overhead_s": 0.05,
    "prefill_tokens_per_s": 60000,
    "transfer_latency_s": 0.5,
    "transfer_tokens_per_s": 200000,
}


def agent_arrivals(seed: int, requests: int, page: int = 64) -> list[dict[str, Any]]:
    """Long documents (no cache) and agent turns (context on the host, a short new part)."""
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(requests):
        t += rng.expovariate(8.0)
        if rng.random() < 0.25:
            spec = {"seq_len": rng.randint(18_000, 60_000), "prefix_len": 0, "host_hit_len": 0}
        else:
            context = rng.randint(40, 240) * page
            spec = {
                "seq_len": context + rng.randint(8, 150),
                "prefix_len": 0,
                "host_hit_len": context,
            }
        out.append({"rid": f"ag-{seed:02d}-{i:05d}", "arrival": round(t, 3), **spec})
    return out


def agent_capture(seed: int = 7, requests: int = 400, **config: int) -> Capture:
    """The node's run under ``prefix``; ``config`` overrides sizes (page, align, chunk...)."""
    conf = {**CONFIG, **config}
    sc = parse_scenario(
        {
            "name": f"agent-{seed}",
            "config": conf,
            "pool": {"free": conf["pool_size"], "evictable": 0},
            "timing": dict(TIMING),
            "waiting": [],
            "arrivals": agent_arrivals(seed, requests, conf["page_size"]),
        },
        name=f"agent-{seed}",
    )
    cap = capture_run(sc.build_node(AS_RAN))
    if cap.oom is not None:
        raise RuntimeError(f"agent traffic {seed} ran out of memory; it must not")
    return cap


def write_agent_node(out: Path, seed: int = 7, requests: int = 400, **config: int) -> list[Path]:
    """PP0's and PP3's logs of one healthy agent-traffic node under ``out``."""
    cap, clock = agent_capture(seed, requests, **config), Clock.at(START)
    paths = [out / "pp0.log", out / "pp3.log"]
    write_log(paths[0], [*startup_lines(cap.cfg, "PP0"), *pp0_lines(cap, clock)])
    write_log(paths[1], [*startup_lines(cap.cfg, "PP3"), *pp3_lines(cap, clock)])
    return paths
