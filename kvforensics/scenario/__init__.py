"""Scenarios: a starting state of a prefill node plus the work that reaches it.

Either hand-written (a TOML file: configuration, pool, queue, arrivals, transfers) or
driven by a Mooncake request trace (prefix hits from block-hash caches)."""

from kvforensics.scenario.loader import load_scenario, parse_scenario
from kvforensics.scenario.spec import Scenario

__all__ = ["Scenario", "load_scenario", "parse_scenario"]
