"""The command line run inside the test process, as ``kvforensics ...`` runs it: its exit
code, stdout and stderr, without starting an interpreter for every run (a second of
imports each). Tests of what only a real process shows (a terminal, a signal, a broken
pipe, the interpreter's own exit) start one instead."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console


def run(
    *args: object, columns: int | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``kvforensics *args`` with ``COLUMNS`` at ``columns`` (None: as the environment has
    it), in ``cwd``; the result as ``subprocess.run`` gives it."""
    from kvforensics.cli import _common, main

    argv = ["kvforensics", *map(str, args)]
    out, err = io.StringIO(), io.StringIO()
    saved_argv, saved_cols = sys.argv, os.environ.get("COLUMNS")
    consoles = (_common.console, _common.err_console)
    widths = [c.width for c in consoles]
    code = 0
    try:
        sys.argv = argv
        if columns is not None:
            os.environ["COLUMNS"] = str(columns)
        # the shared consoles read the width once, when the package is imported: a new
        # process would read it now
        for c in consoles:
            c.width = Console().width
        with contextlib.ExitStack() as stack:
            if cwd is not None:
                stack.enter_context(contextlib.chdir(cwd))
            stack.enter_context(contextlib.redirect_stdout(out))
            stack.enter_context(contextlib.redirect_stderr(err))
            main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved_argv
        if saved_cols is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved_cols
        for c, w in zip(consoles, widths, strict=True):
            c.width = w
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
