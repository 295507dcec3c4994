"""Regenerate the synthetic log fixtures under fixtures/logs/ from the model.

    .venv/bin/python scripts/make_incident_logs.py [--out fixtures/logs] [--trace-limit N]

Deterministic: the same code and scenarios give byte-identical files. What is in them
and what is synthetic: fixtures/logs/incident/README.md.
"""

from __future__ import annotations

import argparse
import random
import string
import tomllib
from pathlib import Path

from kvforensics.scenario.loader import parse_scenario
from kvforensics.synth import Clock, capture_run, pp0_lines, pp1_lines, pp3_lines, startup_lines
from kvforensics.synth.sink import write_log

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "fixtures" / "scenarios"
INCIDENT = SCENARIOS / "incident-2026-11-02.toml"
TRAFFIC = SCENARIOS / "mooncake-conversation.toml"
POLICY = "prefix"
TRAFFIC_START = "2026-11-02 09:05:00"
INCIDENT_START = "2026-11-02 15:16:26"  # round R
#: trace rows for the incident bundle's ordinary traffic (None: the whole trace)
TRACE_LIMIT = None
CLEAN_TRACE_LIMIT = 300
RID_SEED = 20261102
#: the contradiction fixture: the logged out-of-memory amount, altered
CONTRADICTION = ("Try to allocate 2056 tokens.", "Try to allocate 2000 tokens.")


def load(path: Path, **overrides):
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    for key, value in overrides.items():
        if key == "trace_limit":
            data["trace"]["limit"] = value
        else:
            data[key] = value
    return parse_scenario(data, name=path.stem, base=path.parent)


class RidNames:
    """``mc-000123`` -> ``as-`` + 10 lowercase letters/digits, seeded and collision-free."""

    def __init__(self, seed: int, taken: set[str]):
        self._rng = random.Random(seed)
        self._map: dict[str, str] = {}
        self._taken = set(taken)

    def __call__(self, rid: str) -> str:
        name = self._map.get(rid)
        if name is None:
            alphabet = string.ascii_lowercase + string.digits
            while name is None or name in self._taken:
                name = "as-" + "".join(self._rng.choices(alphabet, k=10))
            self._taken.add(name)
            self._map[rid] = name
        return name


def incident_rids() -> set[str]:
    data = tomllib.loads(INCIDENT.read_text(encoding="utf-8"))
    return {w["rid"] for w in data["waiting"]}


def traffic_capture(limit: int | None):
    sc = load(TRAFFIC, trace_limit=limit) if limit else load(TRAFFIC)
    # Trace rids are renamed in a fixed order (by trace row) so names do not depend on
    # the order lines are rendered in.
    names = RidNames(RID_SEED, incident_rids())
    for i in range(len(sc.trace.rows)):
        names(f"{sc.trace.rid_prefix}{i:06d}")
    cap = capture_run(sc.build_node(POLICY))
    if cap.oom is not None:
        raise SystemExit("the traffic run ran out of memory; it must not")
    return cap, names


def incident_capture(first_round: int):
    cap = capture_run(load(INCIDENT, first_round=first_round).build_node(POLICY))
    if cap.oom is None:
        raise SystemExit("the incident scenario did not run out of memory")
    return cap


def next_round(cap) -> int:
    return cap.rounds[-1].round + 1 if cap.rounds else 0


def make_incident(out: Path, limit: int | None) -> dict[str, int]:
    traffic, names = traffic_capture(limit)
    incident = incident_capture(next_round(traffic))
    t0, t1 = Clock.at(TRAFFIC_START), Clock.at(INCIDENT_START)
    cfg = incident.cfg
    d = out / "incident"
    return {
        "pp0.log": write_log(
            d / "pp0.log",
            _chain(
                startup_lines(cfg, "PP0"),
                pp0_lines(traffic, t0, rid=names),
                pp0_lines(incident, t1),
            ),
        ),
        "pp1.log.gz": write_log(
            d / "pp1.log.gz",
            _chain(
                startup_lines(cfg, "PP1"),
                pp1_lines(traffic, t0, rid=names),
                pp1_lines(incident, t1),
            ),
        ),
        "pp3.log": write_log(
            d / "pp3.log",
            _chain(startup_lines(cfg, "PP3"), pp3_lines(traffic, t0), pp3_lines(incident, t1)),
        ),
    }


def make_clean(out: Path) -> int:
    cap, names = traffic_capture(CLEAN_TRACE_LIMIT)
    return write_log(
        out / "clean" / "pp0.log",
        _chain(startup_lines(cap.cfg, "PP0"), pp0_lines(cap, Clock.at(TRAFFIC_START), rid=names)),
    )


def make_contradiction(out: Path) -> int:
    cap = incident_capture(0)
    old, new = CONTRADICTION
    lines = [
        line.replace(old, new)
        for line in _chain(startup_lines(cap.cfg, "PP0"), pp0_lines(cap, Clock.at(INCIDENT_START)))
    ]
    if not any(new in line for line in lines):
        raise SystemExit(f"the contradiction fixture found no {old!r} to alter")
    return write_log(out / "contradiction" / "pp0.log", lines)


def _chain(*parts):
    for part in parts:
        yield from part


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "fixtures" / "logs")
    ap.add_argument("--trace-limit", type=int, default=TRACE_LIMIT)
    ap.add_argument(
        "--only", choices=("incident", "clean", "contradiction", "fleet"), action="append"
    )
    args = ap.parse_args(argv)
    only = set(args.only or ("incident", "clean", "contradiction"))
    if "incident" in only:
        for name, n in make_incident(args.out, args.trace_limit).items():
            print(f"incident/{name}: {n} lines")
    if "clean" in only:
        print(f"clean/pp0.log: {make_clean(args.out)} lines")
    if "contradiction" in only:
        print(f"contradiction/pp0.log: {make_contradiction(args.out)} lines")
    if "fleet" in only:  # not a fixture: a fleet to try `scan` on (synth.fleet)
        from kvforensics.synth.fleet import write_fleet

        for node, paths in write_fleet(args.out / "fleet").items():
            print(f"fleet/{node}: {', '.join(p.name for p in paths)}")


if __name__ == "__main__":
    main()
