"""What the diff and explain commands read: a scenario (run here under the policies asked
for) or saved ledger files (as `simulate --ledger` writes them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from kvforensics.errors import InputError
from kvforensics.ledger_io import read_ledger
from kvforensics.model import POLICIES, Config, RunResult
from kvforensics.model.policies import AS_RAN, FIX
from kvforensics.model.profiles import Profile, get_profile
from kvforensics.progress import run_shown
from kvforensics.report.ledgers import frame_of, normalize, policies_in, select_policy

if TYPE_CHECKING:
    from kvforensics.replay import ReplayOptions, ReplayResult


def is_scenario(path: Path) -> bool:
    return path.suffix.lower() == ".toml"


def check_policies(names: Sequence[str]) -> list[str]:
    bad = [p for p in names if p not in POLICIES]
    if bad or not names:
        raise InputError(
            f"unknown policy {', '.join(bad) or '(none)'}; choose from {', '.join(POLICIES)}"
        )
    return list(names)


def run_scenario(path: Path, policies: Sequence[str]) -> dict[str, RunResult]:
    return scenario_runs(path, policies)[0]


def scenario_runs(
    path: Path, policies: Sequence[str]
) -> tuple[dict[str, RunResult], tuple[Config, Profile]]:
    """The runs of a scenario, and the configuration and model profile they used."""
    from kvforensics.scenario import load_scenario

    sc = load_scenario(path)
    results = {p: run_shown(sc.build_node(p), f"policy {p}") for p in check_policies(policies)}
    return results, (sc.cfg, get_profile(sc.profile))


def ledgers_from_file(path: Path, policies: Sequence[str] | None) -> dict[str, pl.DataFrame]:
    """Every policy in a ledger file (or the ones asked for), one frame each."""
    df = normalize(read_ledger(path), str(path))
    names = policies_in(df)
    if not names:
        return {path.stem: df}
    wanted = list(policies) if policies else names
    return {p: select_policy(df, p, str(path))[1] for p in wanted}


def diff_inputs(
    inputs: Sequence[Path], policies: Sequence[str] | None
) -> tuple[tuple[str, pl.DataFrame], tuple[str, pl.DataFrame]]:
    """The two sides of a diff.

    * one scenario: two policies (default prefix, fixed), each run here;
    * one ledger file holding several policies: `--policy` names the two;
    * two ledger files: each side from its file; one policy name picks it from both,
      two names pick the first from the left file and the second from the right.
    """
    inputs = list(inputs)
    if len(inputs) == 1 and is_scenario(inputs[0]):
        names = list(policies) if policies else [AS_RAN, FIX]
        if len(names) != 2:
            raise InputError(f"diff compares two policies; got {len(names)} ({', '.join(names)})")
        res = run_scenario(inputs[0], names)
        return (names[0], frame_of(res[names[0]])), (names[1], frame_of(res[names[1]]))
    if any(is_scenario(p) for p in inputs):
        raise InputError("diff takes one scenario, or one or two ledger files, not both")
    if len(inputs) == 1:
        if not policies or len(policies) != 2:
            raise InputError(
                f"{inputs[0]}: one ledger file needs --policy naming the two to compare"
            )
        frames = ledgers_from_file(inputs[0], policies)
        if any(p not in frames for p in policies):  # a file of one ledger, no policy column
            raise InputError(
                f"{inputs[0]}: one ledger without a policy column, so it cannot give "
                f"{policies[0]} and {policies[1]}; give two ledger files, or one that holds both"
            )
        return (policies[0], frames[policies[0]]), (policies[1], frames[policies[1]])
    if len(inputs) != 2:
        raise InputError(f"diff takes one scenario or one or two ledger files; got {len(inputs)}")
    if policies and len(policies) > 2:
        raise InputError("with two ledger files, --policy names at most two policies")
    picks = [None, None] if not policies else [policies[0], policies[-1]]
    sides = []
    for path, pick in zip(inputs, picks, strict=True):
        name, df = select_policy(read_ledger(path), pick, str(path))
        sides.append((name, df))
    (ln, lf), (rn, rf) = sides
    if ln == rn:  # same policy from two files: name the sides by file
        ln, rn = f"{inputs[0].name}:{ln}", f"{inputs[1].name}:{rn}"
    return (ln, lf), (rn, rf)


LEDGER_EXTS = {".parquet", ".csv", ".json", ".ndjson"}


def are_logs(paths: Sequence[Path]) -> bool:
    """Log files: neither a scenario nor a saved ledger (any name, .gz or not)."""
    return bool(paths) and all(
        not is_scenario(p) and p.suffix.lower() not in LEDGER_EXTS for p in paths
    )


def replay_inputs(
    paths: Sequence[Path], policies: Sequence[str] | None, options: ReplayOptions | None = None
) -> tuple[ReplayResult, dict[str, RunResult]]:
    """Replay logs: the rebuilt rounds re-run under ``prefix`` and the policies asked for
    (``options``: how the logs are read, as given on the command line; the policies run
    are these)."""
    from kvforensics.replay import ReplayOptions, replay_logs

    names = check_policies(list(policies) if policies else [AS_RAN, FIX])
    others = tuple(p for p in names if p != AS_RAN)
    rr = replay_logs(list(paths), replace(options or ReplayOptions(), policies=others))
    if not rr.results:
        raise InputError("these logs hold no round to replay")
    return rr, {p: rr.results[p] for p in names}
