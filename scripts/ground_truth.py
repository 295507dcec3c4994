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
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
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
        "crash_piece_last": p.crash_piece_last,
        "tags": list(p.tags),
        "in_flight_at_start": [
            {"rid": r, "slots": n, "seconds_left": left} for r, n, left in p.in_flight
        ],
        "round_seconds_mean": round(_round_seconds(p), 4),
        "intruders": list(p.intruders),
        "outside_in_victim_life": [list(x) for x in p.outside_in_life],
        # every outside allocation as it happened under prefix: (time, slots got, next round)
        "outside_taken": [[tk.at, tk.tokens, tk.round_after] for tk in p.world.taken],
        "future": "the same arrivals (up to the crash), transfer times and outside allocation",
        "policies": {
            k: {"end": v.end, "oom": _oom_dict(v.oom), "rounds": v.rounds}
            for k, v in p.policies.items()
        },
    }


def _round_seconds(p: Played) -> float:
    ran = [r.t_end - r.t_start for r in p.world.records if r.pieces and r.oom is None]
    return sum(ran) / len(ran) if ran else 0.0


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
    h = pol.get("holds_for")
    if isinstance(h, dict) and "answer" in h:  # the replay's own form
        return h if h["answer"] == "depends" else None
    if h not in (None, "all", [], {}, True):
        return h
    for key in ("depends_on", "unobserved"):
        v = pol.get(key)
        if v not in (None, "all", [], {}, True):
            return v
    return None


def _unseen_marked(pol: dict, t: dict) -> bool:
    """The replay said the answer holds only for takes outside the adder, where the logs
    could not show one, below some size, and the world had such a take at least that
    large (one that got nothing under ``prefix``)."""
    h = pol.get("holds_for")
    u = h.get("unseen_take") if isinstance(h, dict) else None
    least = u.get("least_slots") if isinstance(u, dict) else None
    out = t.get("outside")
    start, crash = t["start_round"], t["crash"]["round"]
    got_nothing = [
        r for _at, got, r in t.get("outside_taken", []) if not got and start < r <= crash
    ]
    return (
        least is not None and out is not None and "outside_unseen" in t["tags"]
        and bool(got_nothing) and out["tokens"] >= least
    )  # fmt: skip


def _drop_in_life(rep: dict, t: dict) -> bool:
    """An outside allocation the replay found between the victim's first round and the
    crash (one found earlier is a true finding about the log, not this crash's cause)."""
    start, crash = t["start_round"], t["crash"]["round"]
    return any(
        d.get("before_round", -1) > start and d.get("after_round", crash) < crash
        for d in rep.get("unexplained_drops") or []
    )


class Verdicts:
    """Rows of one world: "right", "wrong" or, for a policy answer the replay says depends
    on what the log does not show, "marked right" / "marked wrong"; each difference with
    its category."""

    def __init__(self) -> None:
        self.rows: dict[str, str] = {}
        self.diffs: list[tuple[str, str]] = []

    def row(self, name: str, ok: bool, category: str, what: str, marked: bool = False) -> None:
        self.rows[name] = ("marked " if marked else "") + ("right" if ok else "wrong")
        if not ok:
            self.diffs.append((category, what))


def _contradiction_kind(c: dict) -> str:
    what = c.get("what", "")
    if what in ("baseline", "baseline_end"):
        return "rebuilt baseline outside the pool"
    if what in ("batch line", "#new-token", "replayed plan", "PP plan"):
        return "PP1/PP3 lines and PP0's rebuilt rounds disagree"
    return f"contradiction: {what}"


def _timing(rep: dict) -> tuple[float | None, float | None]:
    """The transfer time and round length the replay assumed (from its assumptions)."""
    text = " ".join(rep.get("assumptions") or [])
    tr = re.search(r"KV transfers take ([\d.]+) s", text)
    rd = re.search(r"a round lasts ([\d.]+) s", text)
    return (float(tr.group(1)) if tr else None), (float(rd.group(1)) if rd else None)


def _policies(v: Verdicts, t: dict, pols: dict, rep: dict) -> None:
    crash = t["crash"]
    got = (pols.get("prefix") or {}).get("oom")
    tr, rd = _timing(rep)
    v.row("prefix reproduces it", _same(got, crash), "prefix forward run differs",
          f"prefix forward: {got}, world {crash} (replay took transfers {tr} s, world "
          f"{t['transfer_base_s']} s ±30%; rounds {rd} s, world {t.get('round_seconds_mean')} s)")  # fmt: skip
    for p in FIXES:
        pol = pols.get(p) or {}
        world = t["policies"][p]["oom"]
        said = pol.get("oom")
        ok = (said is not None) == (world is not None)
        v.row(p, ok, f"{p}: answer differs",
              f"{p}: replay {'OOM ' + str(said) if said else 'no OOM'}, "
              f"world {'OOM ' + str(world) if world else 'no OOM'}",
              marked=_depends(pol) is not None or _unseen_marked(pol, t))  # fmt: skip


def _causes(v: Verdicts, t: dict, rep: dict) -> list[str]:
    held = [c["id"] for c in rep.get("causes", []) if c.get("held")]
    # memory taken outside the adder in the victim's life is claimed only where the world
    # took some then (from the rebuild's falls or from the anchoring's events alike)
    phantom = "external_allocation" in held and not t.get("outside_in_victim_life")
    ok = t["cause"] in held and not phantom and (
        t["cause"] == "external_allocation" or not _drop_in_life(rep, t)
    )
    v.row("cause", ok, "cause differs", f"cause: replay held {held}, world {t['cause']}")
    # the replay does not claim forced_resume on a last piece (the remainder was all there
    # was to take); the world records the forced branch either way
    forced = "forced_resume" in held
    expect = t["forced_resume"] and not t["crash_piece_last"]
    v.row("forced_resume (not on a last piece)", forced == expect, "forced_resume differs",
          f"forced_resume: replay {forced}, world {t['forced_resume']} "
          f"(crash piece last: {t['crash_piece_last']})")  # fmt: skip
    return held


def judge(t: dict, rc: int, rep: dict | None, err: str) -> dict:
    if rep is None:
        return {"replay": f"no JSON (exit {rc}): {err}", "exit": rc}
    v, crash = Verdicts(), t["crash"]
    obs = rep.get("observed_oom")
    v.row("logged OOM read", _same(obs, crash), "logged OOM read differently",
          f"logged OOM read as {obs}, world {crash}")  # fmt: skip
    v.row("start round", rep.get("start_round") == t["start_round"], "start round differs",
          f"start round {rep.get('start_round')}, world {t['start_round']}")  # fmt: skip
    pols = rep.get("policies") or {}
    _policies(v, t, pols, rep)
    held = _causes(v, t, rep)
    contra = rep.get("contradictions") or []
    mism = rep["fidelity"]["mismatches"]
    kinds = sorted(
        {_contradiction_kind(c) for c in contra} | ({"fidelity mismatch"} if mism else set())
    )
    v.row("0 contradictions, 0 mismatches", not kinds, "; ".join(kinds),
          f"{len(contra)} contradiction(s), {len(mism)} mismatch(es): {'; '.join(kinds)}")  # fmt: skip
    return {"exit": rc, "rows": v.rows, "diffs": [d for _c, d in v.diffs],
            "categories": [c for c, _d in v.diffs], "start_round": rep.get("start_round"),
            "held": held, "depends": {p: _depends(pols.get(p) or {}) for p in FIXES}}  # fmt: skip


def _world(seed: int, i: int, root: Path) -> tuple[dict, list[Path]]:
    # every combination in turn: a setting, an outside allocation in one world of three,
    # fast transfers in one of two
    pinned = {"setting": i, "outside": i % 3 == 2, "fast": i % 2 == 1}
    try:
        p = play(seed, **pinned)
    except RuntimeError:
        # none of this seed's draws crashed: the next block of seeds, same combination
        p = play(seed + 100_000, **pinned)
    d = root / f"world-{seed}"
    paths = write_logs(p.world, d, with_ms=p.meta.with_ms)
    t = truth(p)
    (d / "truth.json").write_text(json.dumps(t, indent=1) + "\n")
    return t, paths


def _table(results: list[dict]) -> list[str]:
    names: list[str] = []
    for r in results:
        names += [k for k in r.get("rows", {}) if k not in names]
    out = [
        "| | right | wrong | marked as depending on the unobserved: right / wrong |",
        "|---|---:|---:|---:|",
    ]
    for name in names:
        c = Counter(r["rows"].get(name) for r in results if "rows" in r)
        marked = f"{c['marked right']} / {c['marked wrong']}"
        out.append(f"| {name} | {c['right']} | {c['wrong']} | {marked} |")
    failed = sum(1 for r in results if "rows" not in r)
    if failed:
        out.append(f"| replay gave no JSON | | {failed} | |")
    return out


def _wrong(results: list[dict]) -> list[str]:
    """The worlds with a difference, one line each, then grouped by category."""
    wrong = [r for r in results if "rows" not in r or r["diffs"]]
    out = ["", f"{len(wrong)} world(s) with a difference:"]
    for r in wrong:
        what = "; ".join(r.get("diffs") or [r.get("replay", "?")])
        tags = ", ".join(r["tags"]) or "no tags"
        out.append(f"  seed {r['seed']} ({r['setting']}; {r['cause']}; {r['transfer']} "
                   f"transfers; {tags}): {what}")  # fmt: skip
    groups: dict[str, list[str]] = {}
    for r in wrong:
        for c in r.get("categories") or ["replay gave no JSON"]:
            groups.setdefault(c, []).append(f"{r['seed']}" + (f" [{', '.join(r['tags'])}]"
                                                               if r["tags"] else ""))  # fmt: skip
    out += ["", "By category:"]
    for c, seeds in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        out.append(f"  {c}: {len(seeds)} world(s): {', '.join(seeds)}")
    return out


def _by_tag(results: list[dict]) -> list[str]:
    """Per tag of the worlds, how many of its worlds differ in each row: which part of
    the logs the differences come with."""
    rows = [k for k in (results[0].get("rows") or {}) if k] if results else []
    tags = sorted({t for r in results for t in r["tags"]} | {"(no tag)"})
    out = [
        "",
        "Worlds with a wrong row, by tag (tagged worlds: wrong / all):",
        "| tag | worlds | " + " | ".join(rows) + " |",
        "|---|---:|" + "---:|" * len(rows),
    ]
    for tag in tags:
        mine = [r for r in results if "rows" in r and
                (tag in r["tags"] or (tag == "(no tag)" and not r["tags"]))]  # fmt: skip
        cells = [str(sum(1 for r in mine if r["rows"].get(k, "").endswith("wrong"))) for k in rows]
        out.append(f"| {tag} | {len(mine)} | " + " | ".join(cells) + " |")
    return out


def _worlds_mix(results: list[dict]) -> str:
    n = len(results)
    out = sum(1 for r in results if r["outside"])
    slow = sum(1 for r in results if r["transfer"] == "slow")
    settings = Counter(r["setting"] for r in results)
    last = sum(1 for r in results if r["forced_on_last"])
    return (
        f"{n} worlds: {out} with an outside allocation, {slow} with slow transfers, "
        f"{last} crashing on the forced branch with the victim's last piece; "
        + "; ".join(f"{k}: {v}" for k, v in sorted(settings.items()))
    )


def _result(t: dict, rc: int, rep: dict | None, err: str) -> dict:
    j = judge(t, rc, rep, err)
    j.update(seed=t["seed"], setting=t["setting"], cause=t["cause"], tags=t["tags"],
             forced_on_last=t["forced_resume"] and t["crash_piece_last"],
             outside=t["outside"] is not None, transfer=t["transfer"])  # fmt: skip
    return j


def _drawn(seed: int, i: int, root: Path, reuse: bool) -> tuple[dict, list[Path]]:
    """World ``seed`` (index ``i``): drawn, or with ``reuse`` read back from what an
    earlier run wrote (truth.json is written last, so its presence means the logs are
    whole; the draw is deterministic, so it is the same world)."""
    d = root / f"world-{seed}"
    if reuse and (d / "truth.json").exists():
        return json.loads((d / "truth.json").read_text()), sorted(d.glob("pp*.log"))
    return _world(seed, i, root)


def _one(seed: int, i: int, root: Path, reuse: bool) -> dict:
    """Draw (or reuse) one world, replay its logs on today's code, judge it."""
    t, paths = _drawn(seed, i, root, reuse)
    rc, rep, err = replay(paths)
    if rep is not None:
        (paths[0].parent / "replay.json").write_text(json.dumps(rep, indent=1) + "\n")
    (paths[0].parent / "replay.exit").write_text(f"{rc}\n")
    return _result(t, rc, rep, err)


def _run(args: argparse.Namespace, root: Path) -> list[dict]:
    # each world drawn and replayed in a worker process of its own (the replay itself is a
    # child process of it)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [
            pool.submit(_one, args.seed + i, i, root, args.resume) for i in range(args.worlds)
        ]
        return [f.result() for f in futures]


def _judge_again(root: Path) -> list[dict]:
    """The table again from the truth.json and replay.json an earlier run left in
    ``root`` (no world drawn, no replay run)."""
    results = []
    for d in sorted(root.glob("world-*"), key=lambda p: int(p.name.split("-")[1])):
        t = json.loads((d / "truth.json").read_text())
        rep_path, exit_path = d / "replay.json", d / "replay.exit"
        rep = json.loads(rep_path.read_text()) if rep_path.exists() else None
        rc = int(exit_path.read_text()) if exit_path.exists() else -1
        results.append(_result(t, rc, rep, "no replay.json"))
    if not results:
        raise SystemExit(f"error: {root} holds no world-*/truth.json")
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="directory for the worlds")
    ap.add_argument(
        "--keep", action="store_true", help="keep the worlds' logs (with --out: always)"
    )
    ap.add_argument("--jobs", type=int, default=2, help="worlds drawn and replayed at once")
    ap.add_argument("--resume", action="store_true",
                    help="reuse the worlds an earlier run with the same --out drew (each is "
                    "replayed again)")  # fmt: skip
    ap.add_argument("--judge", type=Path, default=None, metavar="DIR",
                    help="only count again what an earlier run with --out DIR left")  # fmt: skip
    args = ap.parse_args(argv)
    if args.worlds < 1:
        ap.error("--worlds must be at least 1")
    if args.judge is not None:
        root, results = args.judge, _judge_again(args.judge)
    else:
        root = args.out or Path(tempfile.mkdtemp(prefix="ground-"))
        root.mkdir(parents=True, exist_ok=True)
        results = _run(args, root)
    print(_worlds_mix(results))
    print("\n".join(_table(results) + _by_tag(results) + _wrong(results)))
    summary = {"worlds": len(results), "seed": args.seed, "table": _table(results),
               "results": results}  # fmt: skip
    (root / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    if args.keep or args.out is not None or args.judge is not None:
        print(f"summary: {root / 'summary.json'}")
    else:
        shutil.rmtree(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
