"""Run the command line in this process (as `kvforensics ...` would), for tests and the
fuzzer: the exit code, stdout and stderr, without a new interpreter per run."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str



def run_cli(*args, columns: int = 120) -> Outcome:
    from tests.incli import run

    got = run(*args, columns=columns)
    return Outcome(got.returncode, got.stdout, got.stderr)
