"""Differential run: many random prefill rounds through an SGLang release's own PrefillAdder
and through the model (that release's profile, policy upstream), compared record by record.

    .venv/bin/python scripts/conformance.py --rounds 10000 [--release 0.5.23|all] [--seed 0]
        [--profile NAME] [--json out.json]
    .venv/bin/python scripts/conformance.py --multi-round --runs 5000 [--exact-domain] [--shrink]

--multi-round: whole runs through SGLang 0.5.23's real prefill path and through the model,
compared round by round (tests/conformance/multi_round.py); the last line is
"N runs, R rounds, D differences" (D: runs with at least one differing round).
--exact-domain keeps to a narrow domain (no shared prefix, nothing evicted); --shrink
prints the smallest differing run hypothesis finds.

Needs the reference environment (bash scripts/conformance_env.sh). Reports the rounds run,
the rounds outside the reference's domain (skipped), the differences found (the first few
printed as round specs), and the adder decisions per second of SGLang and of the model on
the same rounds, each timed in its own process around the round alone (building the
round's objects and the adder calls; no pipe, no JSON). To shrink a difference to its
smallest round, run the pytest suite: pytest -m conformance tests/conformance.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from tests.conformance import releases  # noqa: E402
from tests.conformance.multi_round import compare_run, run_specs  # noqa: E402
from tests.conformance.reference_client import (  # noqa: E402
    MULTI_SCRIPT,
    ReferenceUnavailable,
    SglangReference,
)
from tests.conformance.rounds import compare_round, round_specs  # noqa: E402


def run(rounds: int, seed_value: int, show: int, release: str, profile: str) -> dict:
    stats = {
        "rounds": 0,
        "out_of_domain": 0,
        "compared": 0,
        "rounds_differing": 0,
        "decisions": 0,
        "sglang_seconds": 0.0,
        "model_seconds": 0.0,
    }
    examples: list[dict] = []
    tags: Counter[str] = Counter()
    with SglangReference(release=release) as ref:

        @seed(seed_value)
        @settings(
            max_examples=rounds,
            deadline=None,
            phases=[Phase.generate],
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(spec=round_specs())
        def one(spec: dict) -> None:
            out = compare_round(ref, spec, profile)
            stats["rounds"] += 1
            stats["decisions"] += out.decisions
            stats["sglang_seconds"] += out.sglang_seconds
            stats["model_seconds"] += out.model_seconds
            if out.out_of_domain:
                stats["out_of_domain"] += 1
                return
            stats["compared"] += 1
            tags.update(out.tags)
            if out.diffs:
                stats["rounds_differing"] += 1
                if len(examples) < show:
                    examples.append({"round_spec": spec, "diffs": out.diffs})

        t0 = time.perf_counter()
        one()
        stats["wall_seconds"] = time.perf_counter() - t0
    d = stats["decisions"]
    stats["sglang_decisions_per_s"] = d / stats["sglang_seconds"] if stats["sglang_seconds"] else 0
    stats["model_decisions_per_s"] = d / stats["model_seconds"] if stats["model_seconds"] else 0
    stats["examples"] = examples
    stats["coverage"] = dict(sorted(tags.items()))
    return stats


def report(s: dict, release: str, profile: str) -> None:
    print(f"SGLang {release} vs model profile {profile}")
    print("coverage (compared rounds that exercised each case):")
    for tag, n in s["coverage"].items():
        print(f"  {n:7d}  {tag}")
    for ex in s["examples"]:
        print("DIFFERENCE round_spec =", json.dumps(ex["round_spec"]))
        for line in ex["diffs"]:
            print("   ", line)
    print(
        f"rounds {s['rounds']} (compared {s['compared']}, outside the reference's domain "
        f"{s['out_of_domain']}), rounds differing {s['rounds_differing']}, "
        f"adder decisions {s['decisions']}"
    )
    print(
        f"decisions/s: SGLang {release} PrefillAdder {s['sglang_decisions_per_s']:,.0f}, "
        f"model {s['model_decisions_per_s']:,.0f} "
        f"(x{s['model_decisions_per_s'] / max(s['sglang_decisions_per_s'], 1e-9):.1f}); "
        f"wall {s['wall_seconds']:.1f} s"
    )


def run_multi(runs: int, seed_value: int, show: int, exact: bool) -> dict:
    stats = {"runs": 0, "rounds": 0, "differing": 0, "decisions": 0,
             "sglang_seconds": 0.0, "model_seconds": 0.0}  # fmt: skip
    kinds: Counter[str] = Counter()
    examples: list[dict] = []
    domain = run_specs(shared=not exact, ample=exact)
    with SglangReference(script=MULTI_SCRIPT) as ref:

        @seed(seed_value)
        @settings(max_examples=runs, deadline=None, phases=[Phase.generate], database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(spec=domain)
        def one(spec: dict) -> None:
            out = compare_run(ref, spec)
            stats["runs"] += 1
            stats["rounds"] += out.rounds
            stats["decisions"] += out.decisions
            stats["sglang_seconds"] += out.sglang_seconds
            stats["model_seconds"] += out.model_seconds
            if out.diffs:
                stats["differing"] += 1
                kinds[_kind(out.diffs[0])] += 1
                if len(examples) < show:
                    examples.append({"run_spec": spec, "diffs": out.diffs[:6]})

        t0 = time.perf_counter()
        one()
        stats["wall_seconds"] = time.perf_counter() - t0
    stats["kinds"], stats["examples"] = dict(kinds.most_common()), examples
    return stats


def _kind(diff: str) -> str:
    """'round 3: free: reference 1 vs model 2' -> 'free' (the first differing field)."""
    parts = diff.split(": ")
    if parts[0] == "rounds":  # one side stopped at an out-of-memory, the other did not
        return "the number of rounds"
    field = parts[2] if parts[1].startswith("record") else parts[1]
    return field.split(" ")[0]


def shrink(exact: bool) -> dict | None:
    from hypothesis import find
    from hypothesis.errors import NoSuchExample

    with SglangReference(script=MULTI_SCRIPT) as ref:
        try:
            return find(run_specs(shared=not exact, ample=exact),
                        lambda s: bool(compare_run(ref, s).diffs),
                        settings=settings(max_examples=500, deadline=None, database=None))  # fmt: skip
        except NoSuchExample:
            return None


def multi_main(args) -> int:
    s = run_multi(args.runs, args.seed, args.show, args.exact_domain)
    for kind, n in s["kinds"].items():
        print(f"  {n:7d}  runs first differ in {kind}")
    for ex in s["examples"]:
        print("DIFFERENCE run_spec =", json.dumps(ex["run_spec"]))
        for line in ex["diffs"]:
            print("   ", line)
    if args.shrink and s["differing"]:
        print("SMALLEST DIFFERING run_spec =", json.dumps(shrink(args.exact_domain)))
    d = s["decisions"]
    print(
        f"decisions/s on the same rounds: SGLang 0.5.23 real path "
        f"{d / max(s['sglang_seconds'], 1e-9):,.0f}, model {d / max(s['model_seconds'], 1e-9):,.0f}"
        f"; wall {s['wall_seconds']:.1f} s"
    )
    if args.json:
        args.json.write_text(json.dumps(s, indent=2))
    print(f"{s['runs']} runs, {s['rounds']} rounds, {s['differing']} differences")
    return 1 if s["differing"] else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=5, help="differing rounds to print")
    ap.add_argument("--json", type=Path, help="write the figures here too")
    ap.add_argument(
        "--release",
        default=releases.DEFAULT,
        help="SGLang release to hold the model to, or 'all' (default %(default)s)",
    )
    ap.add_argument(
        "--profile",
        help="model profile (default: the release's; 'fork' shows how far the fork is)",
    )
    ap.add_argument("--multi-round", action="store_true", help="whole runs, round by round")
    ap.add_argument("--runs", type=int, default=200, help="multi-round runs")
    ap.add_argument("--exact-domain", action="store_true",
                    help="only runs with no shared prefix and no eviction")
    ap.add_argument("--shrink", action="store_true", help="print the smallest differing run")
    args = ap.parse_args(argv)
    try:
        return multi_main(args) if args.multi_round else single_main(args)
    except (ValueError, ReferenceUnavailable) as exc:
        print(f"conformance: {exc}", file=sys.stderr)
        return 2


def single_main(args) -> int:
    todo = releases.selected() if args.release == "all" else [args.release]
    results, differing = {}, 0
    for release in todo:
        profile = args.profile or releases.profile_name(release)
        s = run(args.rounds, args.seed, args.show, release, profile)
        report(s, release, profile)
        results[release] = {"profile": profile, **s}
        differing += s["rounds_differing"]
    if args.json:
        args.json.write_text(json.dumps(results if len(todo) > 1 else s, indent=2))
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
