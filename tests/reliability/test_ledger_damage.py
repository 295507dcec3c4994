"""Damaged ledger files: a one-line error or the ledger's own result, never a raw polars
error (exit 70)."""

from __future__ import annotations

import csv

import polars as pl

from kvforensics.model.ledger import LATER
from tests.conftest import FIXTURES
from tests.reliability._run import run_cli

INCIDENT = FIXTURES / "scenarios" / "incident-2026-11-02.toml"
DIFF = ("--policy", "prefix,fixed")


def _rows(tmp_path) -> tuple[list[str], list[list[str]], str]:
    """The incident's ledger as CSV: header, rows, and what ``diff`` says of it."""
    path = tmp_path / "good.csv"
    assert run_cli("simulate", INCIDENT, "--ledger", path).code == 0
    out = run_cli("diff", path, *DIFF)
    assert out.code == 0, out.stderr
    header, *rows = list(csv.reader(path.open(newline="")))
    return header, rows, out.stdout


def _write(path, header, rows):
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([header, *rows])
    return path


def test_a_boolean_column_read_as_text_gives_the_same_diff(tmp_path):
    """``forced`` empty in the rows polars infers types from, then ``true``/``false``: the
    column reads as text, and casting text to Boolean raised InvalidOperationError."""
    header, rows, _ = _rows(tmp_path)
    at, rnd = header.index("forced"), header.index("round")
    blank = [r for r in rows if r[at] == ""]
    assert {r[at] for r in rows} - {""} == {"true", "false"}
    # copies of the blank rows first (as later rounds, so no step is there twice)
    copies = [[*r[:rnd], str(int(r[rnd]) + 1000 * k), *r[rnd + 1 :]]
              for k in range(1, 11) for r in blank]  # fmt: skip
    path = _write(tmp_path / "late.csv", header, rows[:1] + copies + rows[1:])
    assert pl.read_csv(path).schema["forced"] == pl.String
    # the same rows, typed from the whole file, as Parquet: the diff it gives
    typed = tmp_path / "late.parquet"
    pl.read_csv(path, infer_schema_length=None).write_parquet(typed)
    want = run_cli("diff", typed, *DIFF)
    out = run_cli("diff", path, *DIFF)
    assert (out.code, want.code) == (0, 0), out.stderr
    assert out.stdout.replace(str(path), "L") == want.stdout.replace(str(typed), "L")


def test_a_header_that_lost_a_column_is_one_line(tmp_path):
    """The header lost a name, the rows did not, and the rows repeat a thousand times."""
    header, rows, _ = _rows(tmp_path)
    path = _write(tmp_path / "lost.csv", [h for h in header if h != "reason"], rows * 1000)
    for args in (("diff", path, *DIFF), ("explain", path, "--round", "0")):
        out = run_cli(*args)
        assert out.code == 2, out.stderr
        assert out.stderr.strip() == (
            f"error: {path}: cannot read as csv: found more fields than defined in 'Schema'"
        )


def test_a_ledger_from_before_the_later_columns_reads(tmp_path):
    """The columns added later are optional, as the ledger's schema says."""
    header, rows, said = _rows(tmp_path)
    keep = [i for i, h in enumerate(header) if h not in LATER]
    path = _write(tmp_path / "old.csv", [header[i] for i in keep],
                  [[r[i] for i in keep] for r in rows])  # fmt: skip
    out = run_cli("diff", path, *DIFF)
    assert out.code == 0, out.stderr
    assert out.stdout.replace(str(path), "L") == said.replace(str(tmp_path / "good.csv"), "L")


def test_rows_copied_again_are_one_line(tmp_path):
    """The rows a thousand times over: each step is one row, so the second copy is damage
    (diff spent minutes laying out rounds of thousands of pieces)."""
    header, rows, _ = _rows(tmp_path)
    path = _write(tmp_path / "copies.csv", header, rows * 1000)
    step = rows[0][header.index("step")]
    for args in (("diff", path, *DIFF), ("explain", path, "--round", "0")):
        out = run_cli(*args)
        assert out.code == 2, out.stderr
        assert out.stderr.strip() == (
            f"error: {path}: row {len(rows) + 1}: round 0 step {step} of policy 'prefix' is "
            "there already; not a ledger as simulate --ledger writes it"
        )
