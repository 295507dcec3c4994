"""A synthesized fleet for scans: one node per directory, each a different story.

* ``incident``: the 2026-11-02 round R..R+3 (PP0, PP1, PP3), out of memory through the gap;
* ``agent``: healthy agent-like traffic with many admissions through gaps, no out of memory;
* ``clean``: healthy conversation traffic (the Mooncake trace);
* ``external``: out of memory with no gap, after slots were taken outside the adder
  (``synth.incidents.external_allocation``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from kvforensics.model.policies import AS_RAN
from kvforensics.scenario.loader import load_scenario
from kvforensics.synth.agent import write_agent_node
from kvforensics.synth.capture import capture_run
from kvforensics.synth.clock import Clock
from kvforensics.synth.incidents import external_allocation
from kvforensics.synth.ranks import pp0_lines, pp1_lines, pp3_lines
from kvforensics.synth.sink import write_log
from kvforensics.synth.startup import startup_lines

ROOT = Path(__file__).resolve().parent.parent.parent
INCIDENT = ROOT / "fixtures" / "scenarios" / "incident-2026-11-02.toml"
CLEAN = ROOT / "fixtures" / "logs" / "clean" / "pp0.log"
INCIDENT_START = "2026-11-02 15:16:26"


def write_incident_node(out: Path) -> list[Path]:
    """The incident's rounds alone, as its three ranks logged them."""
    cap = capture_run(load_scenario(INCIDENT).build_node(AS_RAN))
    clock, cfg = Clock.at(INCIDENT_START), cap.cfg
    paths = []
    for rank, body in (
        ("PP0", pp0_lines(cap, clock)),
        ("PP1", pp1_lines(cap, clock)),
        ("PP3", pp3_lines(cap, clock)),
    ):
        path = out / (f"{rank.lower()}.log.gz" if rank == "PP1" else f"{rank.lower()}.log")
        write_log(path, [*startup_lines(cfg, rank), *body])
        paths.append(path)
    return paths


def write_fleet(out: Path) -> dict[str, list[Path]]:
    """The fleet's nodes under ``out`` (one directory each)."""
    clean = out / "clean" / "pp0.log"
    clean.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(CLEAN, clean)
    return {
        "incident": write_incident_node(out / "incident"),
        "agent": write_agent_node(out / "agent"),
        "clean": [clean],
        "external": external_allocation().write(out / "external"),
    }
