"""Export DataFrames (ledgers, events) by file extension, atomically."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model

from kvforensics.clip import clip
from kvforensics.errors import InputError
from kvforensics.model.config import MAX_TOKENS
from kvforensics.model.ledger import LATER, NAMES, SCHEMA
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
    writers: dict[str, Callable[[Path], object]] = {
        ".parquet": lambda p: df.write_parquet(p),
        ".csv": lambda p: _flat(df).write_csv(p),
        ".json": lambda p: df.write_json(p),
        ".ndjson": lambda p: df.write_ndjson(p),
    }
    atomic_write(out, writers[ext])


def read_ledger(path: str | Path) -> pl.DataFrame:
    """A ledger file, checked against the ledger's schema row by row, in its dtypes."""
    df = read_frame(path)
    validate_ledger(df, str(path))
    return _typed(df)


#: the text pydantic's lax booleans accept (validation has passed), as the values
_BOOL_TEXT = {
    **dict.fromkeys(("true", "t", "yes", "y", "on", "1"), True),
    **dict.fromkeys(("false", "f", "no", "n", "off", "0"), False),
}


def _typed(df: pl.DataFrame) -> pl.DataFrame:
    """The ledger's columns in the ledger's dtypes. A CSV column whose first rows are empty
    reads as text (polars infers from the first rows), and polars casts no text to
    Boolean: the validated words are mapped instead."""
    cols = []
    for name, have in df.schema.items():
        want = SCHEMA.get(name)
        if want is None or have == want:
            continue
        if want == pl.Boolean and have == pl.Utf8:
            words = pl.col(name).str.strip_chars().str.to_lowercase()
            cols.append(words.replace_strict(_BOOL_TEXT, default=None, return_dtype=pl.Boolean))
        else:
            cols.append(pl.col(name).cast(want, strict=False))
    return df.with_columns(cols) if cols else df


def read_frame(path: str | Path) -> pl.DataFrame:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    ext = path.suffix.lower()
    try:
        # glob=False, and ndjson from an open file: a [ or * in a name is no pattern
        if ext == ".parquet":
            return pl.read_parquet(path, glob=False)
        if ext == ".csv":
            return pl.read_csv(path, glob=False)
        if ext == ".json":
            return pl.read_json(path)
        if ext == ".ndjson":
            with path.open("rb") as fh:
                return pl.read_ndjson(fh)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except Exception as exc:  # polars raises many kinds; the user needs one line
        said = next(iter(str(exc).strip().splitlines()), "") or type(exc).__name__
        raise InputError(f"{path}: cannot read as {ext[1:]}: {clip(said, 120)}") from None
    raise InputError(f"{path}: unknown ledger format {ext!r}; use one of {', '.join(FORMATS)}")


#: (a dtype of the schema looks up its class: polars hashes them alike)
_PY: dict[Any, type] = {pl.Int64: int, pl.Utf8: str, pl.Boolean: bool, pl.Float64: float}
#: rows validated at a time (a Python dict per row only for this many)
_BATCH = 20_000


@lru_cache(maxsize=1)
def _rows_adapter() -> TypeAdapter[list[Any]]:
    """The ledger's columns as a pydantic row (built from the model's schema, so a new
    column is checked without a change here); numbers bounded like the node's sizes."""
    bounded = Annotated[int, Field(ge=-MAX_TOKENS, le=MAX_TOKENS)]
    fields = {
        name: ((bounded if dtype == pl.Int64 else _PY[dtype]) | None, None)
        for name, dtype in SCHEMA.items()
    }
    # the fields are the schema's, known at run time only: no overload of create_model
    # types them, and the row model is no static type
    row: type[BaseModel] = create_model(  # type: ignore[call-overload]
        "LedgerRow", __config__=ConfigDict(allow_inf_nan=False, extra="ignore"), **fields
    )
    return TypeAdapter(list[row])  # type: ignore[valid-type]


def validate_ledger(df: pl.DataFrame, source: str) -> None:
    """One line naming the first bad row and column of a ledger read from a file."""
    missing = [c for c in NAMES if c not in df.columns and c not in LATER]
    if missing:
        raise InputError(
            f"{source}: not a ledger (missing columns: {', '.join(missing[:5])}); "
            "give a file written by simulate --ledger or report"
        )
    _check_steps(df, source)
    adapter = _rows_adapter()
    present = [c for c in NAMES if c in df.columns]  # a file from before LATER lacks those
    for offset in range(0, df.height, _BATCH):
        part = df.slice(offset, _BATCH).select(present)
        try:
            adapter.validate_python(part.to_dicts())
        except ValidationError as exc:
            e = exc.errors(include_url=False)[0]
            row, col = e["loc"][0], e["loc"][-1]
            got = repr(e["input"])
            got = clip(got, 40)
            raise InputError(
                f"{source}: row {offset + int(row) + 1}, column {col}: {e['msg']} (got {got}); "
                "not a ledger as simulate --ledger writes it"
            ) from None
    _check_pieces(df, source)


def _check_steps(df: pl.DataFrame, source: str) -> None:
    """Each step of a round is one row (per policy): a row repeated (a file's rows copied
    into it again) is damage, refused before any work grows with the copies."""
    keys = [c for c in ("policy", "round", "step") if c in df.columns]
    again = df.select(keys).with_row_index("_row").filter(~pl.struct(keys).is_first_distinct())
    if again.height:
        r = again.row(0, named=True)
        of = f" of policy {clip(repr(r['policy']), 40)}" if "policy" in r else ""
        raise InputError(
            f"{source}: row {r['_row'] + 1}: round {clip(str(r['round']), 30)} step "
            f"{clip(str(r['step']), 30)}{of} is there already; not a ledger as simulate "
            "--ledger writes it"
        )


#: the calls a ledger row records (``model/adder.py``, ``model/node.py``)
CALLS = ("add_one_req", "add_chunked_req", "allocate")


def _check_pieces(df: pl.DataFrame, source: str) -> None:
    """Every row is one of the calls; an allocation that did not fail allocates a piece:
    its start and end are there and in order (explain and the figures compute with them)."""
    odd = df.with_row_index("_row").filter(~pl.col("call").is_in(CALLS))
    if odd.height:
        r = odd.row(0, named=True)
        raise InputError(
            f"{source}: row {r['_row'] + 1}: call {clip(repr(r['call']), 40)} is none of "
            f"{', '.join(CALLS)}; not a ledger as simulate --ledger writes it"
        )
    bad = df.with_row_index("_row").filter(
        (pl.col("call") == "allocate")
        & (pl.col("budget_state").fill_null("") != "OOM")
        & (pl.col("start").is_null() | pl.col("end").is_null() | (pl.col("end") < pl.col("start")))
    )
    if bad.height:
        r = bad.row(0, named=True)
        raise InputError(
            f"{source}: row {r['_row'] + 1}: an allocation without its piece (start {r['start']}, "
            f"end {r['end']}); not a ledger as simulate --ledger writes it"
        )
