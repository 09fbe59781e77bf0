"""The code's import graph has no cycle: value types sit in leaf modules, behaviour is passed
in at wiring, and no function-local import hides a loop (imports for type checking only are
not run, so they do not count)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("coordinator", "worker_agent", "shared")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "gen" not in path.relative_to(ROOT).parts:
                found[_module_name(path)] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, modules: dict[str, Path], here: str) -> set[str]:
    """Modules of the project that `tree` imports when it runs, at any depth of the code."""
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    out.add(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:
                package = here.rsplit(".", node.level)[0]
                base = f"{package}.{node.module}"
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in modules:
                    out.add(full)  # `from coordinator import ledger`
                elif base in modules:
                    out.add(base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    out.discard(here)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_no_import_cycles() -> None:
    modules = _modules()
    graph = {
        name: _imports(ast.parse(path.read_text()), modules, name) for name, path in modules.items()
    }
    # A package's __init__ importing its own modules is how packages work, not a loop.
    for name in list(graph):
        graph[name] = {m for m in graph[name] if not m.startswith(name + ".")}
    assert _cycles(graph) == []


def test_the_checker_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from coordinator.heart import ledger\n"
        "def f():\n    from coordinator.heart import orders\n"
    )
    modules = {"coordinator.heart.ledger": Path(), "coordinator.heart.orders": Path()}
    assert _imports(tree, modules, "x") == {"coordinator.heart.orders"}


# What the heart may lean on: the store, the fleet as routing sees it, the journal, metrics and
# spans, the streams (presence, relay), settings and the test-only fault hooks. Run kinds,
# servicers and the other front ends come to it at wiring, never by import.
HEART_MAY_IMPORT = (
    "coordinator.heart",
    "coordinator.store",
    "coordinator.worker_index",
    "coordinator.fleet",
    "coordinator.journal",
    "coordinator.metrics",
    "coordinator.attempt_spans",
    "coordinator.presence",
    "coordinator.relay",
    "coordinator.settings",
    "coordinator.faults",
    "coordinator.capabilities",
    "shared",
)


def test_the_heart_imports_no_run_kind_and_no_front_end() -> None:
    modules = _modules()
    heart = {name: path for name, path in modules.items() if name.startswith("coordinator.heart")}
    assert {"coordinator.heart.ledger", "coordinator.heart.dispatch"} <= set(heart)
    outside = {
        (name, imported)
        for name, path in heart.items()
        for imported in _imports(ast.parse(path.read_text()), modules, name)
        if not imported.startswith(HEART_MAY_IMPORT)
    }
    assert outside == set()
