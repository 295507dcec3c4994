"""The import graph of ``kvforensics``: no circle between modules, and no arrow from a
lower stage up to a higher one.

Every module is parsed with ``ast``; imports at module level and inside functions count
alike (a function-level import still ties the two modules together, it only hides it).
``from pkg import name`` depends on where ``name`` lives: the submodule ``pkg.name``, the
submodule a package's ``__init__`` re-exports it from, or else ``pkg`` itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "kvforensics"

#: The stages, lowest first; a module may import only from its own stage or a lower tier.
#: Stages in one tier are siblings and import nothing from each other. This is the order
#: the code holds to, which differs from the prose order "logs -> rounds -> model -> replay
#: -> causes -> report" in two places: ``rounds`` sizes requests with the model's
#: arithmetic (``model`` imports nothing of ``rounds``), and ``replay`` names and orders
#: the causes it finds (``causes`` reads rebuilt rounds and the model, never a replay).
TIERS: list[set[str]] = [
    # leaf modules everything may use
    {"kvforensics", "clip", "collector", "progress"},
    {"errors"},
    {"outputs"},
    # the figures' canvas, palette and token axis, shared by report and scan
    {"plotting"},
    {"model"},
    # logs check sizes against the model's limits; scenarios build model requests;
    # ledger_io reads and writes the model's ledgers
    {"logs", "scenario", "ledger_io"},
    {"rounds", "synth"},
    {"causes"},
    {"replay"},
    # which code runs, compiled or not (read by the CLI's --version)
    {"_compiled"},
    {"scan", "reproduce"},
    {"report"},
    {"exec"},
    {"cli"},
    {"__main__"},
]
RANK = {stage: i for i, tier in enumerate(TIERS) for stage in tier}


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _known(name: str) -> str | None:
    """The longest prefix of a dotted name that is one of our modules."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if _is_package(module) else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _reexports(package: str) -> dict[str, str]:
    """Names a package's ``__init__`` imports from its modules: name -> module."""
    out: dict[str, str] = {}
    for node in ast.walk(TREES[package]):
        if isinstance(node, ast.ImportFrom):
            source = _known(_absolute(package, node))
            if source is not None and source != package:
                for alias in node.names:
                    out[alias.asname or alias.name] = source
    return out


REEXPORTS = {name: _reexports(name) for name in MODULES if _is_package(name)}


def _targets(module: str, node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Import):
        return [t for t in (_known(a.name) for a in node.names) if t is not None]
    assert isinstance(node, ast.ImportFrom)
    source = _known(_absolute(module, node))
    if source is None:
        return []
    out = []
    for alias in node.names:
        full = f"{source}.{alias.name}"
        if full in MODULES:
            out.append(full)
        elif source in REEXPORTS and alias.name in REEXPORTS[source]:
            out.append(REEXPORTS[source][alias.name])
        else:
            out.append(source)
    return out


def _type_only(tree: ast.Module) -> set[int]:
    """The ids of import statements under ``if TYPE_CHECKING:``: they name a type for the
    checker and load nothing (a lower stage may annotate with the record of a higher one
    that it is handed, without importing that stage)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            out.update(id(n) for b in node.body for n in ast.walk(b))
    return out


def _edges() -> dict[str, dict[str, int]]:
    """module -> {imported module: line of the first import} (module- and function-level
    imports; not those only the type checker reads)."""
    edges: dict[str, dict[str, int]] = {name: {} for name in MODULES}
    for module, tree in TREES.items():
        skip = _type_only(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skip:
                for target in _targets(module, node):
                    if target != module:
                        edges[module].setdefault(target, node.lineno)
    return edges


EDGES = _edges()


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _where(module: str, target: str) -> str:
    path = MODULES[module].relative_to(ROOT)
    return f"{path}:{EDGES[module][target]}: {module} imports {target}"


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in MODULES:
        if start in index:
            continue
        work = [(start, iter(sorted(EDGES[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(EDGES[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_stage_has_a_tier() -> None:
    stages = {_stage(m) for m in MODULES}
    assert stages <= set(RANK), f"stages missing from TIERS: {sorted(stages - set(RANK))}"


def test_no_import_cycle() -> None:
    lines = []
    for component in _cycles():
        members = set(component)
        lines.append("cycle: " + ", ".join(component))
        for module in component:
            lines += [f"  {_where(module, t)}" for t in sorted(EDGES[module]) if t in members]
    assert not lines, "modules import each other in a circle:\n" + "\n".join(lines)


def test_no_import_runs_back_up() -> None:
    lines = []
    for module, targets in sorted(EDGES.items()):
        for target in sorted(targets):
            low, high = _stage(module), _stage(target)
            if low != high and RANK[high] >= RANK[low]:
                lines.append(f"  {_where(module, target)} ({low} may not use {high})")
    assert not lines, "imports from a lower stage up to a higher one:\n" + "\n".join(lines)
