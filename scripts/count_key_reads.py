"""String-key reads per file: ``x["literal"]`` subscripts read (not assigned) and
``x.get("literal")`` calls, outside the functions that write JSON or Parquet.

    python scripts/count_key_reads.py [PATH...] [--all] [--stage | --input] [--total] [--lines]

A stage result read by string key fails at run time when a key is renamed; a typed
result fails at type-check time. The JSON and Parquet edge (``as_dict``, ``to_dict``,
``from_dict``, ``to_json``, ``as_row``, a function whose name ends in ``_json``,
``_row``/``_rows`` or ``_frame``, which builds a frame to write) is where dicts belong, so
it is left out unless ``--all``. A ``Literal["..."]`` in an annotation is a type, not a
read, and is never counted.

Not every read left is of a stage result. Input arrives as dicts or frames and is read
by key where it comes in; those reads are the *input edge*:

- a polars frame's column or a frame row's field (``df["rid"]``, ``row["time"]`` of a
  row from ``iter_rows(named=True)``, ``row(..., named=True)`` or ``to_dicts()``), told
  from the code in the function (a parameter or a function typed ``pl.DataFrame`` or
  ``pl.Series``, a frame method's result, ``pl.*``);
- the environment (``os.environ``);
- a TOML table (a function whose name ends in ``_toml``);
- the functions and files of ``INPUT_EDGE``, each with its reason.

``--stage`` counts only the rest, the reads of stage results (what the issue "typed
results end to end" counts down to zero); ``--input`` only the input edge, with
``--lines`` each read's reason. Without either, both are counted together.

Prints ``count path`` per file with at least one read (``--total`` adds the sum,
``--lines`` each read's line numbers); paths default to the package.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

#: functions at the JSON/Parquet edge, where reading and writing dicts is the point
EDGE_NAMES = frozenset(
    {"as_dict", "to_dict", "from_dict", "to_json", "as_json", "from_json", "as_row", "as_rows"}
)
EDGE_SUFFIXES = ("_json", "_row", "_rows", "_frame")
#: functions that read a parsed TOML document's tables into records
TOML_SUFFIX = "_toml"

#: (path inside the package, function or "*" for the whole file) -> why its reads are
#: input, not stage results. Keep it short: a stage result read here is a bug to fix, not
#: an entry to add.
INPUT_EDGE: dict[tuple[str, str], str] = {
    ("logs/catalogue.py", "*"): "the format catalogue's TOML tables, read into Format records",
    ("logs/samples.py", "*"): "a catalogue's TOML samples, parsed and checked against events",
    ("logs/extract.py", "*"): "log lines into events: frames of lines, partitions of them",
    ("logs/reader.py", "_collect"): "one chunk's events (a frame, from a tuple)",
    ("rounds/provenance.py", "where"): "file:line of an event row (a frame row)",
    ("rounds/batches.py", "_time"): "an event row's time (a frame row)",
    ("rounds/config.py", "read_config"): "the sizes the startup lines and flags give, by field",
    ("model/config.py", "size_problems"): "sizes to check, by configuration field",
    ("replay/stock.py", "analyse_stock"): "the command line's --chunk-size and --pool-size",
    ("errors.py", "validation_line"): "pydantic's ValidationError.errors() dicts",
    ("ledger_io.py", "validate_ledger"): "pydantic's errors on a ledger file's rows",
    ("scenario/spec.py", "*"): "a scenario's TOML request tables, kept as the file gives them",
    ("scenario/loader.py", "check_work"): "a scenario's TOML request tables",
    ("scenario/trace.py", "*"): "a Mooncake trace's JSON lines and its TOML table",
    ("reproduce/toml_out.py", "dumps"): "the scenario tables it writes as TOML",
    ("synth/agent.py", "agent_capture"): "the synthetic node's sizes, by configuration field",
    ("report/manifest.py", "read_manifest"): "a report's own JSON manifest, read back",
}

_FRAME_TYPE = re.compile(r"^(pl\.)?(DataFrame|Series|LazyFrame)( \| None)?$")
_FRAMES_TYPE = re.compile(
    r"^(Iterator|Iterable|Generator|list|Sequence)\[(pl\.)?(DataFrame|Series)[,\]]"
)
#: methods only a frame or a series has among the values read here (a dict has none)
_FRAME_METHODS = frozenset(
    {"filter", "select", "with_columns", "with_row_index", "sort", "head", "tail", "unique",
     "drop_nulls", "fill_null", "cast", "agg", "join", "slice", "gather", "to_series",
     "drop", "rename", "explode", "value_counts", "sample", "implode", "group_by", "len"}
)  # fmt: skip

#: what a name or an expression holds: a frame (or a series), several frames, frames by
#: key (a dict of them), a frame's rows, one row
FRAME, FRAMES, FRAME_MAP, ROWS, ROW = "frame", "frames", "frame_map", "rows", "row"
PACKAGE = Path(__file__).resolve().parents[1] / "kvforensics"


def is_edge(name: str) -> bool:
    return name in EDGE_NAMES or name.endswith(EDGE_SUFFIXES)


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _type_kind(annotation: ast.AST | None) -> str | None:
    """FRAME for a frame or a series, FRAMES for a list or an iterator of them."""
    if annotation is None:
        return None
    text = ast.unparse(annotation)
    return FRAME if _FRAME_TYPE.match(text) else FRAMES if _FRAMES_TYPE.match(text) else None


@dataclass(frozen=True, slots=True)
class Read:
    line: int
    #: None for a stage result's read; else why it is input
    why: str | None


def _frame_functions(tree: ast.AST, public: bool = False) -> dict[str, str]:
    """Functions and methods typed to return frames, by name: what they return (FRAME
    or FRAMES); ``public``: only those whose name has no leading underscore."""
    return {
        n.name: kind
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        and (kind := _type_kind(n.returns)) is not None
        and not (public and n.name.startswith("_"))
    }


_PACKAGE_FRAMES: dict[str, str] = {}


def _package_frames() -> dict[str, str]:
    """The package's public functions typed to return frames (imported ones are called
    by name in other modules)."""
    if not _PACKAGE_FRAMES and PACKAGE.is_dir():
        for f in sorted(PACKAGE.rglob("*.py")):
            _PACKAGE_FRAMES.update(_frame_functions(ast.parse(f.read_text()), public=True))
    return _PACKAGE_FRAMES


class _Counter(ast.NodeVisitor):
    def __init__(
        self, edge_too: bool, frame_funcs: dict[str, str], allowed: dict[str, str]
    ) -> None:
        self.edge_too, self.frame_funcs, self.allowed = edge_too, frame_funcs, allowed
        self.hits: list[Read] = []
        #: per function being visited: what its names hold, where the code tells
        self.scopes: list[dict[str, str]] = [{}]
        self.functions: list[str] = []

    # what an expression holds

    def _kind(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return next((s[node.id] for s in reversed(self.scopes) if node.id in s), None)
        if isinstance(node, ast.Subscript):
            base = self._kind(node.value)
            if base == FRAME:
                return FRAME  # a column, or a slice of rows
            one = {ROWS: ROW, FRAMES: FRAME, FRAME_MAP: FRAME}.get(base or "")
            return one if not _is_str(node.slice) else None
        if isinstance(node, ast.DictComp):
            return FRAME_MAP if self._kind(node.value) == FRAME else None
        if isinstance(node, ast.Call):
            return self._call_kind(node)
        if isinstance(node, ast.BinOp | ast.Compare | ast.UnaryOp):
            parts = (
                [node.left, node.right] if isinstance(node, ast.BinOp)
                else [node.left, *node.comparators] if isinstance(node, ast.Compare)
                else [node.operand]
            )  # fmt: skip
            return FRAME if any(self._kind(p) == FRAME for p in parts) else None
        return None

    def _call_kind(self, node: ast.Call) -> str | None:
        f = node.func
        named = any(k.arg == "named" for k in node.keywords)
        if isinstance(f, ast.Name):
            return self.frame_funcs.get(f.id)
        if not isinstance(f, ast.Attribute):
            return None
        if isinstance(f.value, ast.Name) and f.value.id == "pl":
            return FRAME
        if f.attr == "values" and self._kind(f.value) == FRAME_MAP:
            return FRAMES
        if f.attr == "to_dicts" or (f.attr == "iter_rows" and named):
            return ROWS
        if f.attr == "row" and named:
            return ROW
        if f.attr in self.frame_funcs:
            return self.frame_funcs[f.attr]
        return FRAME if f.attr in _FRAME_METHODS else None

    def _bind(self, target: ast.AST, kind: str | None) -> None:
        if isinstance(target, ast.Name):
            if kind is not None:
                self.scopes[-1][target.id] = kind
            else:
                self.scopes[-1].pop(target.id, None)

    def _bind_pairs(self, target: ast.AST, value: ast.AST) -> None:
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
            for t, v in zip(target.elts, value.elts, strict=False):
                self._bind(t, self._kind(v))
        else:
            self._bind(target, self._kind(value))

    def _element(self, iterable: ast.AST) -> str | None:
        """What a loop over ``iterable`` binds each time."""
        return {ROWS: ROW, FRAMES: FRAME}.get(self._kind(iterable) or "")

    def _bind_loop(self, target: ast.AST, iterable: ast.AST) -> None:
        """A loop's target; ``i, x`` over ``enumerate(xs)`` binds ``x`` as an element."""
        f = iterable.func if isinstance(iterable, ast.Call) else None
        if (
            isinstance(f, ast.Name) and f.id == "enumerate" and isinstance(iterable, ast.Call)
            and iterable.args and isinstance(target, ast.Tuple) and len(target.elts) == 2
        ):  # fmt: skip
            self._bind(target.elts[1], self._element(iterable.args[0]))
        else:
            self._bind(target, self._element(iterable))

    # scopes and bindings

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if not self.edge_too and is_edge(node.name):
            return
        a = node.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
        typed = {p.arg: _type_kind(p.annotation) for p in params}
        self.scopes.append({name: kind for name, kind in typed.items() if kind is not None})
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()
        self.scopes.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for t in node.targets:
            self._bind_pairs(t, node.value)
            self.visit(t)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
            kind = _type_kind(node.annotation) or self._kind(node.value)
            self._bind(node.target, kind)
        self.visit(node.target)  # the annotation is a type: not visited

    def visit_For(self, node: ast.For) -> None:
        self.visit(node.iter)
        self._bind_loop(node.target, node.iter)
        for child in (node.target, *node.body, *node.orelse):
            self.visit(child)

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp) -> None:
        """The loops first: they bind what the element reads."""
        for gen in node.generators:
            self.visit(gen)
        self.visit(node.elt)

    visit_ListComp = visit_SetComp = visit_GeneratorExp = _comprehension

    def visit_DictComp(self, node: ast.DictComp) -> None:
        for gen in node.generators:
            self.visit(gen)
        self.visit(node.key)
        self.visit(node.value)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self.visit(node.iter)
        self._bind_loop(node.target, node.iter)
        self.visit(node.target)
        for cond in node.ifs:
            self.visit(cond)

    def visit_arg(self, node: ast.arg) -> None:
        """An annotation is a type (``Literal["x"]``), not a read."""

    # the reads

    def _why(self, receiver: ast.AST) -> str | None:
        kind = self._kind(receiver)
        if kind == FRAME:
            return "a polars column"
        if kind == ROW:
            return "a polars frame row"
        if isinstance(receiver, ast.Attribute) and receiver.attr == "environ":
            return "the environment"
        if any(fn.endswith(TOML_SUFFIX) for fn in self.functions):
            return "a TOML table"
        inside = (self.allowed[fn] for fn in reversed(self.functions) if fn in self.allowed)
        return next(inside, self.allowed.get("*"))

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load) and _is_str(node.slice):
            self.hits.append(Read(node.lineno, self._why(node.value)))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "get" and node.args and _is_str(node.args[0]):
            self.hits.append(Read(node.lineno, self._why(f.value)))
        self.generic_visit(node)


def _visit_returns(counter: _Counter, tree: ast.AST) -> None:
    """A return annotation is a type too: drop it before visiting."""
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
            n.returns = None
    counter.visit(tree)


def _allowed(path: Path) -> dict[str, str]:
    """The ``INPUT_EDGE`` entries of one file, by function."""
    parts = path.resolve().parts
    if "kvforensics" not in parts:
        return {}
    inside = "/".join(parts[len(parts) - parts[::-1].index("kvforensics") :])
    return {fn: why for (p, fn), why in INPUT_EDGE.items() if p == inside}


def classified(path: Path, edge_too: bool = False) -> list[Read]:
    """Each string-key read in one file, with why it is input (None: a stage result)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    frames = _package_frames() | _frame_functions(tree)
    counter = _Counter(edge_too, frames, _allowed(path))
    _visit_returns(counter, tree)
    return sorted(counter.hits, key=lambda r: r.line)


def reads(path: Path, edge_too: bool = False) -> list[int]:
    """The line of each string-key read in one file."""
    return [r.line for r in classified(path, edge_too)]


def count(path: Path, edge_too: bool = False) -> int:
    """The string-key reads in one file."""
    return len(reads(path, edge_too))


def _files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        out += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", type=Path)
    ap.add_argument("--all", action="store_true", help="count the JSON/Parquet edge too")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--stage", action="store_true", help="only the reads of stage results")
    which.add_argument("--input", action="store_true", help="only the input edge's reads")
    ap.add_argument("--total", action="store_true", help="print the sum last")
    ap.add_argument("--lines", action="store_true", help="print each read's line numbers")
    args = ap.parse_args(argv)
    paths = args.paths or [Path(__file__).resolve().parents[1] / "kvforensics"]
    total = 0
    for f in _files(paths):
        found = classified(f, args.all)
        if args.stage:
            found = [r for r in found if r.why is None]
        elif args.input:
            found = [r for r in found if r.why is not None]
        total += len(found)
        if found:
            where = ""
            if args.lines:
                where = "  lines " + ", ".join(
                    f"{r.line} ({r.why})" if args.input else str(r.line) for r in found
                )
            print(f"{len(found):5d} {f}{where}")
    if args.total:
        print(f"{total:5d} total")
    return 0


if __name__ == "__main__":
    sys.exit(main())
