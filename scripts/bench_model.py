"""Benchmark the admission model on a long Mooncake-driven run.

Reports ``add_one_req`` decisions per second of the adder alone on generated rounds, and
rounds per second of the whole node (adder, pool, block-hash caches, transfers) on the
Mooncake conversation trace, ledger recording on, one core. The adder's figures come twice:
at the garbage collector's default pace and at the pace a model run and a replay go at
(``kvforensics.collector``: the ledger the benchmark keeps growing is what the collector
walks over and over at the default pace). The reference is SGLang's own
PrefillAdder driven with mock allocator and cache on the same kind of machine: about
50k decisions/s (see tests/conformance for the harness that measures it in the same run
when its environment exists); the target is 5x that.

With the compiled model in use (``KVF_COMPILE=1`` at install, setup.py), the adder and node
figures are measured again in a second interpreter that loads the package's ``.py`` files
(``KVF_PURE_PYTHON=1``),
and both are printed side by side with their ratio (``side_by_side``); ``--pure`` runs
only that interpreted leg.

    python scripts/bench_model.py [--limit N] [--policy prefix,fixed] [--rerun LOG] [--pure]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "fixtures" / "scenarios" / "mooncake-conversation.toml"
SGLANG_REFERENCE_PER_S = 50_000


def bench(policy: str, limit: int | None, record: bool = True) -> dict:
    from kvforensics.scenario import load_scenario

    sc = load_scenario(SCENARIO)
    if limit:
        sc.trace.rows = sc.trace.rows[:limit]
    node = sc.build_node(policy, record=record)
    t0 = time.perf_counter()
    res = node.run()
    dt = time.perf_counter() - t0
    decisions = sum(
        1 for r in res.rounds for (call, *_rest) in r.decisions if call == "add_one_req"
    )
    return {
        "policy": policy,
        "record": record,
        "requests": len(res.requests),
        "rounds": len(res.rounds),
        "add_one_req": decisions,
        "seconds": round(dt, 3),
        "decisions_per_s": round(decisions / dt),
        "rounds_per_s": round(len(res.rounds) / dt),
    }


def paced(fn, *args, pace: str) -> dict:
    """``fn(*args)`` at the collector's ``default`` pace or at a ``run``'s."""
    from kvforensics.collector import fewer_collections

    if pace == "run":
        with fewer_collections():
            out = fn(*args)
    else:
        out = fn(*args)
    return {**out, "collector_pace": pace}


def adder_only(rounds: int, seed: int = 7) -> dict:
    """The adder alone on generated rounds (what the SGLang harness measures): a fresh
    pool and queue each round, ``add_one_req`` until it says stop, ledger on."""
    import random

    from kvforensics.model import Config, Ledger, PagePool, PrefillAdder, Request, get_policy

    rng = random.Random(seed)
    cfg = Config(
        page_size=64,
        chunked_prefill_size=16384,
        max_prefill_tokens=16384,
        pool_size=1 << 22,
        align_size=256,
    )
    policy = get_policy("fixed")
    specs = []
    for _ in range(rounds):
        q = []
        for i in range(rng.randint(4, 24)):
            seq = rng.randint(64, 6000)
            dp = rng.randint(0, (seq - 1) // 64) * 64 if rng.random() < 0.5 else 0
            hh = rng.randint(0, seq - 1 - dp) if rng.random() < 0.3 else 0
            q.append((f"r{i}", seq, dp, hh))
        specs.append((rng.randint(8, 4096) * 64, q))
    ledger = Ledger()
    decisions = 0
    t0, c0 = time.perf_counter(), time.process_time()
    for free, q in specs:
        pool = PagePool(page_size=64, size=cfg.pool_size, free=free, record=False)
        adder = PrefillAdder(cfg, policy, pool, ledger=ledger)
        for rid, seq, dp, hh in q:
            decisions += 1
            if adder.add_one_req(Request(rid, seq, dp, hh)).budget_state != "CONTINUE":
                break
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "bench": "adder_only",
        "rounds": rounds,
        "add_one_req": decisions,
        "seconds": round(dt, 3),
        "cpu_seconds": round(cpu, 3),
        "decisions_per_cpu_s": round(decisions / cpu),
        "decisions_per_s": round(decisions / dt),
        "x_sglang_reference": round(decisions / dt / SGLANG_REFERENCE_PER_S, 2),
    }


def same_rounds_as_sglang(seconds: float = 3.0) -> dict:
    """The round the SGLang harness times (8 whole admissions, tests/conformance
    sglang_ref.py --bench), through the model: fresh adder, pool and requests each round."""
    from kvforensics.model import Config, Ledger, PagePool, PrefillAdder, Request, get_policy

    cfg = Config(
        page_size=64,
        chunked_prefill_size=1 << 30,
        max_prefill_tokens=1 << 30,
        pool_size=(1 << 30) + (1 << 20),
    )
    policy = get_policy("upstream")
    queue = [(f"r{i}", 1000 + 64 * i, 128, 64 * (i % 2)) for i in range(8)]
    ledger = Ledger()
    calls = rounds = 0
    t0, c0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        pool = PagePool(
            page_size=64,
            size=cfg.pool_size,
            free=1 << 30,
            evictable={"cache": (1 << 20) - 8 * 128, **{f"p{i}": 128 for i in range(8)}},
            record=False,
        )
        adder = PrefillAdder(cfg, policy, pool, ledger=ledger)
        for rid, seq, dp, hh in queue:
            calls += 1
            req = Request(rid, seq, dp, hh, prefix_keys=(f"p{rid[1:]}",))
            if adder.add_one_req(req).budget_state != "CONTINUE":
                break
        rounds += 1
        if len(ledger.rows) > 1_000_000:
            ledger.rows.clear()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "bench": "same_rounds_as_sglang",
        "add_one_req": calls,
        "seconds": round(dt, 3),
        "cpu_seconds": round(cpu, 3),
        "decisions_per_cpu_s": round(calls / cpu),
        "decisions_per_s": round(calls / dt),
    }


def rerun_rounds(log: Path) -> dict:
    """Every replayable round of ``log`` (e.g. one ``make_large_log.py`` wrote) re-run
    under ``prefix`` from its own rebuilt state and compared with the log, as the replay's
    fidelity check and whole-log pass do: CPU time per round, the rounds held."""
    from kvforensics.replay.fidelity import compare
    from kvforensics.replay.whole_log import is_replayable, rerun
    from kvforensics.rounds import from_logs

    rb = from_logs([log], hold=True).rebuild
    rounds = [r for r in rb.rounds if is_replayable(r)]
    mismatches = 0
    c0 = time.process_time()
    for rnd in rounds:
        run = rerun(rb, rnd, "prefix")
        if rnd.decisions:
            mismatches += len(compare(rnd, run.steps))
    cpu = time.process_time() - c0
    return {
        "bench": "rerun_rounds",
        "log": str(log),
        "rounds": len(rounds),
        "mismatches": mismatches,
        "cpu_seconds": round(cpu, 3),
        "us_per_round": round(cpu / max(1, len(rounds)) * 1e6, 1),
    }


def sglang_reference() -> dict | None:
    """SGLang 0.5.23's own PrefillAdder on the same rounds, when its environment exists."""
    import subprocess

    py = ROOT / ".venv-sglang" / "bin" / "python"
    if not py.exists():
        return None
    out = subprocess.run(
        [str(py), str(ROOT / "tests" / "conformance" / "sglang_ref.py"), "--bench"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1:]}
    d = json.loads(out.stdout.strip().splitlines()[-1])
    return {
        "bench": "sglang_0.5.23_same_rounds",
        "add_one_req": d["add_one_req_calls"],
        "seconds": round(d["seconds"], 3),
        "decisions_per_s": round(d["decisions_per_s"]),
    }


def source_only() -> None:
    """Load ``kvforensics`` from its ``.py`` files even where a compiled build sits beside
    them (the pure-Python leg of the comparison); before any kvforensics import. All of the
    package or none: compiled rounds and replay code do not run on an interpreted model."""
    import os

    os.environ["KVF_PURE_PYTHON"] = "1"


def measure(args: argparse.Namespace) -> list[dict]:
    mine = [paced(same_rounds_as_sglang, pace=p) for p in ("default", "run")]
    ref = None if args.pure else sglang_reference()
    if ref and "decisions_per_s" in ref:
        for m in mine:
            m["x_sglang_measured"] = round(m["decisions_per_s"] / ref["decisions_per_s"], 1)
    out = [*mine]
    if not args.pure:
        out.append(
            ref
            or {
                "bench": "sglang reference",
                "skipped": "no .venv-sglang (scripts/conformance_env.sh)",
            }
        )
    out += [paced(adder_only, 20000, pace=p) for p in ("default", "run")]
    out += [timed_cpu(bench, p, args.limit, True) for p in args.policy.split(",")]
    if args.rerun:
        out.append(rerun_rounds(args.rerun))
    return out


def timed_cpu(fn, *args) -> dict:
    """``fn(*args)`` with the CPU-seconds it took added (``cpu_seconds``)."""
    c0 = time.process_time()
    out = fn(*args)
    return {**out, "cpu_seconds": round(time.process_time() - c0, 3)}


def _key(row: dict) -> tuple:
    return (row.get("bench"), row.get("policy"), row.get("collector_pace"))


def side_by_side(compiled: list[dict], pure: list[dict]) -> list[dict]:
    """Each figure of both legs and compiled over pure: decisions per CPU-second for the
    adder, CPU-seconds for a whole node run (pure over compiled: the speed-up)."""
    by_key = {_key(r): r for r in pure}
    rows = []
    for c in compiled:
        p = by_key.get(_key(c))
        if p is None:
            continue
        name = c.get("bench") or f"node {c['policy']}"
        if c.get("collector_pace"):
            name += f" (collector pace: {c['collector_pace']})"
        if "decisions_per_cpu_s" in c:
            what, pv, cv = (
                "decisions per CPU-second",
                p["decisions_per_cpu_s"],
                c["decisions_per_cpu_s"],
            )
            ratio = cv / pv
        elif "rerun" in name or "us_per_round" in c:
            what, pv, cv = "us of CPU a round", p["us_per_round"], c["us_per_round"]
            ratio = pv / cv
        else:
            what, pv, cv = "CPU-seconds", p["cpu_seconds"], c["cpu_seconds"]
            ratio = pv / cv
        rows.append({"bench": name, "figure": what, "pure": pv, "compiled": cv,
                     "speed_up": round(ratio, 2)})  # fmt: skip
    return rows


def main() -> None:
    import subprocess
    import sys

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=None, help="trace rows to use (default all)")
    ap.add_argument("--policy", default="prefix,fixed")
    ap.add_argument("--rerun", type=Path, help="also re-run every round of this log")
    ap.add_argument("--pure", action="store_true", help="the interpreted model only")
    args = ap.parse_args()
    if args.pure:
        source_only()
    from kvforensics._compiled import COMPILED, describe

    out = measure(args)
    if args.pure or not COMPILED:
        print(json.dumps([{"model": describe()}, *out], indent=2))
        return
    leg = subprocess.run(
        [sys.executable, __file__, "--pure", *sys.argv[1:]],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    pure = json.loads(leg.stdout)[1:]
    report = {"model": describe(), "compiled": out, "pure_python": pure,
              "side_by_side": side_by_side(out, pure)}  # fmt: skip
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
