"""The project's shape rules, checked on the code itself: no function in the package is
over 80 lines (a longer one is split along its concepts, not left to grow)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "kvforensics"
MAX_LINES = 80


def long_functions(root: Path, limit: int = MAX_LINES) -> list[str]:
    """``path:line name (n lines)`` for every function or method longer than ``limit``,
    nested ones included; the length runs from the ``def`` (or its first decorator) to the
    last line of the body."""
    out = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                n = node.end_lineno - first + 1
                if n > limit:
                    out.append(f"{path.relative_to(root.parent)}:{first} {node.name} ({n} lines)")
    return out


def test_no_function_over_80_lines():
    assert long_functions(PACKAGE) == []


def test_the_check_finds_a_long_function(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (pkg / "m.py").write_text(f"def short():\n    return 1\n\n\ndef long():\n{body}\n")
    assert long_functions(pkg) == [f"pkg/m.py:5 long ({MAX_LINES + 1} lines)"]
