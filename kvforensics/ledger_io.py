"""Export DataFrames (ledgers, events) by file extension, atomically."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from kvforensics.errors import InputError
from kvforensics.outputs import atomic_write

FORMATS = (".parquet", ".csv", ".json", ".ndjson")


def _flat(df: pl.DataFrame) -> pl.DataFrame:
    """CSV holds no lists or structs: join lists, JSON-encode structs."""
    cols = []
    for name, dtype in df.schema.items():
        if isinstance(dtype, pl.List):
            cols.append(pl.col(name).cast(pl.List(pl.Utf8)).list.join(",").alias(name))
        elif isinstance(dtype, pl.Struct):
            cols.append(pl.col(name).struct.json_encode().alias(name))
        else:
            cols.append(pl.col(name))
    return df.select(cols)


def ledger_format(out: str | Path) -> str:
    """The file type an output name asks for, checked before any work."""
    ext = Path(out).suffix.lower()
    if ext not in FORMATS:
        raise InputError(f"{out}: unknown output format {ext!r}; use one of {', '.join(FORMATS)}")
    return ext


def write_frame(df: pl.DataFrame, out: str | Path) -> None:
    out = Path(out)
    ext = ledger_format(out)
    writers = {
        ".parquet": lambda p: df.write_parquet(p),
        ".csv": lambda p: _flat(df).write_csv(p),
        ".json": lambda p: df.write_json(p),
        ".ndjson": lambda p: df.write_ndjson(p),
    }
    atomic_write(out, writers[ext])


def read_frame(path: str | Path) -> pl.DataFrame:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    ext = path.suffix.lower()
    try:
        if ext == ".parquet":
            return pl.read_parquet(path)
        if ext == ".csv":
            return pl.read_csv(path)
        if ext == ".json":
            return pl.read_json(path)
        if ext == ".ndjson":
            return pl.read_ndjson(path)
    except Exception as exc:  # polars raises many kinds; the user needs one line
        raise InputError(f"{path}: cannot read as {ext[1:]} ({type(exc).__name__})") from None
    raise InputError(f"{path}: unknown ledger format {ext!r}; use one of {', '.join(FORMATS)}")
