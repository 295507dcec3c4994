"""Ground truth for replay's counterfactual answers, from an independent node simulator
(tests/ground): draw worlds in which the pre-fix fork runs out of memory, write each
one's logs (PP0, PP1, PP3) and truth.json, replay the logs with every policy, and count
where the replay agrees with the world.

    PYTHONPATH=. python scripts/ground_truth.py --worlds 40 --seed 1 --out gt --keep

Rows of the table: the logged out-of-memory read as it happened; the forward run under
``prefix`` reproduces it (round, rid, tokens, available); each fix's answer (out of
memory or not) is the world's; the cause is the world's. A policy answer the replay marks
as holding only under some readings of what the log does not show (a ``holds_for`` entry,
when the JSON has one) is counted apart.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.ground.draw import Played, play
from tests.ground.render import write_logs

FIXES = ("fixed", "upstream", "drain", "park")
ROOT = Path(__file__).resolve().parent.parent


def _oom_dict(o) -> dict | None:
    return None if o is None else {
        "round": o.round, "rid": o.rid, "tokens": o.tokens, "available": o.available,
    }  # fmt: skip


def truth(p: Played) -> dict:
    m = p.meta
    return {
        "seed": m.seed,
        "attempt": m.attempt,
        "setting": m.setting,
        "pool": p.world.cfg.pool,
        "transfer_base_s": m.transfer_base_s,
        "transfer": "fast" if m.transfer_base_s < 2.0 else "slow",
        "timestamps_ms": m.with_ms,
        "outside": None if m.outside is None else asdict(m.outside),
        "victim": p.victim,
        "start_round": p.start_round,
        "crash": _oom_dict(p.world.oom),
        "cause": p.cause,
        "forced_resume": p.forced_resume,
        "intruders": list(p.intruders),
        "outside_in_victim_life": [list(x) for x in p.outside_in_life],
        "future": "the same arrivals (up to the crash), transfer times and outside allocation",
        "policies": {
            k: {"end": v.end, "oom": _oom_dict(v.oom), "rounds": v.rounds}
            for k, v in p.policies.items()
        },
    }


def replay(paths: list[Path]) -> tuple[int, dict | None, str]:
    cmd = [sys.executable, "-m", "kvforensics", "replay", *map(str, paths), "--format", "json",
           "--policy", ",".join(FIXES), "--no-progress"]  # fmt: skip
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    try:
        return r.returncode, json.loads(r.stdout), ""
    except json.JSONDecodeError:
        return r.returncode, None, (r.stderr.strip().splitlines() or ["no output"])[-1]


def _same(a: dict | None, b: dict | None) -> bool:
    keys = ("round", "rid", "tokens", "available")
    return a is not None and b is not None and all(a.get(k) == b.get(k) for k in keys)


def _depends(pol: dict) -> object | None:
    """What the replay says an answer depends on, if its JSON says (``holds_for`` or a
    key like it); None when the answer is not so marked."""
    for key in ("holds_for", "depends_on", "unobserved"):
        v = pol.get(key)
        if v not in (None, "all", [], {}, True):
            return v
    return None


def _drop_in_life(rep: dict, t: dict) -> bool:
    """An outside allocation the replay found between the victim's first round and the
    crash (one found earlier is a true finding about the log, not this crash's cause)."""
    start, crash = t["start_round"], t["crash"]["round"]
    return any(
        d.get("before_round", -1) > start and d.get("after_round", crash) < crash
        for d in rep.get("unexplained_drops") or []
    )


def judge(t: dict, rc: int, rep: dict | None, err: str) -> dict:
    """Row -> "right" | "wrong" | "marked" (a policy answer said to depend on the unseen)."""
    if rep is None:
        return {"replay": f"no JSON (exit {rc}): {err}"}
    rows: dict[str, str] = {}
    diffs: list[str] = []
    crash = t["crash"]
    obs = rep.get("observed_oom")
    rows["logged OOM read"] = "right" if _same(obs, crash) else "wrong"
    if rows["logged OOM read"] == "wrong":
        diffs.append(f"logged OOM read as {obs}, world {crash}")
    rows["start round"] = "right" if rep.get("start_round") == t["start_round"] else "wrong"
    if rows["start round"] == "wrong":
        diffs.append(f"start round {rep.get('start_round')}, world {t['start_round']}")
    pols = rep.get("policies") or {}
    got = (pols.get("prefix") or {}).get("oom")
    rows["prefix reproduces it"] = "right" if _same(got, crash) else "wrong"
    if rows["prefix reproduces it"] == "wrong":
        diffs.append(f"prefix forward: {got}, world {crash}")
    for p in FIXES:
        pol = pols.get(p) or {}
        world = t["policies"][p]["oom"]
        ok = (pol.get("oom") is not None) == (world is not None)
        rows[p] = "marked" if _depends(pol) is not None else ("right" if ok else "wrong")
        if not ok:
            diffs.append(f"{p}: replay {'OOM ' + str(pol.get('oom')) if pol.get('oom') else 'no OOM'}"
                         f", world {'OOM ' + str(world) if world else 'no OOM'}")  # fmt: skip
    held = [c["id"] for c in rep.get("causes", []) if c.get("held")]
    cause_ok = t["cause"] in held and (
        t["cause"] == "external_allocation" or not _drop_in_life(rep, t)
    )
    rows["cause"] = "right" if cause_ok else "wrong"
    if not cause_ok:
        diffs.append(f"cause: replay held {held}, world {t['cause']}")
    forced_ok = ("forced_resume" in held) == t["forced_resume"]
    rows["forced_resume"] = "right" if forced_ok else "wrong"
    if not forced_ok:
        diffs.append(f"forced_resume: replay {'forced_resume' in held}, world {t['forced_resume']}")
    rows["0 contradictions, 0 mismatches"] = (
        "right" if not rep.get("contradictions") and not rep["fidelity"]["mismatches"] else "wrong"
    )
    if rows["0 contradictions, 0 mismatches"] == "wrong":
        diffs.append(f"contradictions {len(rep.get('contradictions') or [])}, "
                     f"mismatches {len(rep['fidelity']['mismatches'])}")  # fmt: skip
    return {"exit": rc, "rows": rows, "diffs": diffs, "start_round": rep.get("start_round"),
            "held": held, "depends": {p: _depends(pols.get(p) or {}) for p in FIXES}}  # fmt: skip


def _world(seed: int, root: Path) -> tuple[dict, list[Path]]:
    p = play(seed)
    d = root / f"world-{seed}"
    paths = write_logs(p.world, d, with_ms=p.meta.with_ms)
    t = truth(p)
    (d / "truth.json").write_text(json.dumps(t, indent=1) + "\n")
    return t, paths


def _table(results: list[dict]) -> list[str]:
    names: list[str] = []
    for r in results:
        names += [k for k in r.get("rows", {}) if k not in names]
    out = ["| | right | wrong | marked (depends on the unobserved) |", "|---|---:|---:|---:|"]
    for name in names:
        c = Counter(r["rows"].get(name) for r in results if "rows" in r)
        out.append(f"| {name} | {c['right']} | {c['wrong']} | {c['marked']} |")
    failed = sum(1 for r in results if "rows" not in r)
    if failed:
        out.append(f"| replay gave no JSON | | {failed} | |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="directory for the worlds (kept)")
    ap.add_argument("--keep", action="store_true", help="keep the worlds' logs")
    args = ap.parse_args(argv)
    if args.worlds < 1:
        ap.error("--worlds must be at least 1")
    root = args.out or Path(tempfile.mkdtemp(prefix="ground-"))
    root.mkdir(parents=True, exist_ok=True)
    seeds = range(args.seed, args.seed + args.worlds)
    worlds = [_world(s, root) for s in seeds]
    # the replays are separate processes, two at a time
    with ThreadPoolExecutor(max_workers=2) as pool:
        reps = list(pool.map(lambda w: replay(w[1]), worlds))
    results = []
    for (t, paths), (rc, rep, err) in zip(worlds, reps, strict=True):
        j = judge(t, rc, rep, err)
        j.update(seed=t["seed"], setting=t["setting"], cause=t["cause"],
                 outside=t["outside"] is not None, transfer=t["transfer"])  # fmt: skip
        if rep is not None and (args.keep or args.out):
            (paths[0].parent / "replay.json").write_text(json.dumps(rep, indent=1) + "\n")
        results.append(j)
    lines = _table(results)
    wrong = [r for r in results if "rows" not in r or r["diffs"]]
    lines.append("")
    lines.append(f"{len(wrong)} world(s) with a difference:")
    for r in wrong:
        what = "; ".join(r.get("diffs") or [r.get("replay", "?")])
        lines.append(f"  seed {r['seed']} ({r['setting']}, {r['cause']}, "
                     f"{'outside' if r['outside'] else 'no outside'}, {r['transfer']}): {what}")  # fmt: skip
    print("\n".join(lines))
    summary = {"worlds": len(results), "seed": args.seed, "results": results}
    (root / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    print(f"summary: {root / 'summary.json'}")
    if not args.keep and args.out is None:
        shutil.rmtree(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
