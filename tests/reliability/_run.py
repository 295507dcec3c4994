"""Run the command line in this process (as `kvforensics ...` would), for tests and the
fuzzer: the exit code, stdout and stderr, without a new interpreter per run."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from dataclasses import dataclass


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str



def run_cli(*args, columns: int = 120) -> Outcome:
    from kvforensics.cli import main

    out, err = io.StringIO(), io.StringIO()
    argv, cols = sys.argv, os.environ.get("COLUMNS")
    sys.argv = ["kvforensics", *map(str, args)]
    os.environ["COLUMNS"] = str(columns)
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = argv
        if cols is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = cols
    return Outcome(code, out.getvalue(), err.getvalue())
