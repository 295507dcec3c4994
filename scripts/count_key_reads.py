"""String-key reads per file: ``x["literal"]`` subscripts read (not assigned) and
``x.get("literal")`` calls, outside the functions that write JSON or Parquet.

    python scripts/count_key_reads.py [PATH...] [--all] [--total] [--lines]

A stage result read by string key fails at run time when a key is renamed; a typed
result fails at type-check time. The JSON and Parquet edge (``as_dict``, ``to_dict``,
``from_dict``, ``to_json``, ``as_row``, a function whose name ends in ``_json`` or
``_row``/``_rows``) is where dicts belong, so it is left out unless ``--all``. A polars
column read (``df["rid"]``) counts too: the checker cannot tell a frame from a dict.

Prints ``count path`` per file with at least one read (``--total`` adds the sum,
``--lines`` each read's line numbers); paths default to the package.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

#: functions at the JSON/Parquet edge, where reading and writing dicts is the point
EDGE_NAMES = frozenset(
    {"as_dict", "to_dict", "from_dict", "to_json", "as_json", "from_json", "as_row", "as_rows"}
)
EDGE_SUFFIXES = ("_json", "_row", "_rows")


def is_edge(name: str) -> bool:
    return name in EDGE_NAMES or name.endswith(EDGE_SUFFIXES)


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


class _Counter(ast.NodeVisitor):
    def __init__(self, edge_too: bool) -> None:
        self.edge_too = edge_too
        self.hits: list[int] = []

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if self.edge_too or not is_edge(node.name):
            self.generic_visit(node)

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load) and _is_str(node.slice):
            self.hits.append(node.lineno)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "get" and node.args and _is_str(node.args[0]):
            self.hits.append(node.lineno)
        self.generic_visit(node)


def reads(path: Path, edge_too: bool = False) -> list[int]:
    """The line of each string-key read in one file."""
    counter = _Counter(edge_too)
    counter.visit(ast.parse(path.read_text(), filename=str(path)))
    return sorted(counter.hits)


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
    ap.add_argument("--total", action="store_true", help="print the sum last")
    ap.add_argument("--lines", action="store_true", help="print each read's line numbers")
    args = ap.parse_args(argv)
    paths = args.paths or [Path(__file__).resolve().parents[1] / "kvforensics"]
    total = 0
    for f in _files(paths):
        lines = reads(f, args.all)
        total += len(lines)
        if lines:
            where = f"  lines {', '.join(map(str, lines))}" if args.lines else ""
            print(f"{len(lines):5d} {f}{where}")
    if args.total:
        print(f"{total:5d} total")
    return 0


if __name__ == "__main__":
    sys.exit(main())
