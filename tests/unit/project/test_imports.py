"""The code's import graph has no cycle, and each folder imports only the folders below it.

Every import counts: those made only for type checking (`if TYPE_CHECKING:`) and those inside
functions too, since an annotation that needs a module above it is the same arrow drawn
upward. Value types sit in `coordinator/model/`, behaviour is passed in at wiring
(`coordinator/app/server.py`), so the graph of modules has no cycle and the graph of folders
(the rooms of `docs/ARCHITECTURE.md`) runs one way.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("coordinator", "worker_agent", "shared", "deskfleet")

# Each room of the coordinator, and the rooms it may import (besides itself). `shared` is
# below them all; `worker_agent` imports only `shared`. A folder not named here is refused:
# a new room states its place.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "shared": frozenset(),
    "worker_agent": frozenset({"shared"}),
    # The client library agent developers install: the services are not its to import.
    "deskfleet": frozenset({"shared"}),
    "store": frozenset({"shared"}),
    "model": frozenset({"shared", "store"}),
    "security": frozenset({"shared", "store", "model"}),
    "streams": frozenset({"shared", "store", "model"}),
    "observe": frozenset({"shared", "store", "model", "streams"}),
    "heart": frozenset({"shared", "store", "model", "streams", "observe"}),
    "fleet": frozenset({"shared", "store", "model", "security", "streams", "observe", "heart"}),
    "runs": frozenset({"shared", "store", "model", "security", "streams", "observe", "heart"}),
    "agent": frozenset(
        {"shared", "store", "model", "security", "streams", "observe", "heart", "runs"}
    ),
    "servicers": frozenset(
        {"shared", "store", "model", "security", "streams", "observe", "heart"}
        | {"fleet", "runs", "agent"}
    ),
    # The front ends reach the coordinator over gRPC only (the CLI through the client
    # library where they overlap); the console shares the CLI's client side and the
    # failure counter.
    "admin_cli": frozenset({"shared", "deskfleet"}),
    "console": frozenset({"shared", "deskfleet", "admin_cli", "security"}),
    "app": frozenset(
        {"shared", "store", "model", "security", "streams", "observe", "heart"}
        | {"fleet", "runs", "agent", "servicers", "console", "admin_cli", "deskfleet"}
    ),
}


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


def _imports(tree: ast.AST, modules: dict[str, Path], here: str) -> set[str]:
    """Modules of the project that `tree` imports, at any depth of the code, for type
    checking included."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:
                package = here.rsplit(".", node.level)[0]
                base = f"{package}.{node.module}"
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in modules:
                    out.add(full)  # `from coordinator.security import audit`
                elif base in modules:
                    out.add(base)
    out.discard(here)
    return out


def room_of(module: str) -> str:
    """`coordinator.runs.desktop.scope` -> `runs`; `shared.text` -> `shared`."""
    parts = module.split(".")
    if parts[0] != "coordinator":
        return parts[0]
    return parts[1] if len(parts) > 1 else "coordinator"


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {
        name: _imports(ast.parse(path.read_text()), modules, name) for name, path in modules.items()
    }
    # A package's __init__ importing its own modules is how packages work, not a loop.
    for name in list(graph):
        graph[name] = {m for m in graph[name] if not m.startswith(name + ".")}
    return graph


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


def _upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a room its rules do not allow, as `module -> module (room -> room)`."""
    out = []
    for name, imported in sorted(graph.items()):
        here = room_of(name)
        if here == "coordinator":  # the package itself: its docstring only
            continue
        allowed = MAY_IMPORT.get(here)
        for other in sorted(imported):
            there = room_of(other)
            if there == here:
                continue
            if allowed is None or there not in allowed:
                out.append(f"{name} -> {other} ({here} -> {there})")
    return out


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_each_folder_imports_only_the_folders_below_it() -> None:
    graph = _graph()
    rooms = {room_of(name) for name in graph} - {"coordinator"}
    assert rooms - set(MAY_IMPORT) == set(), "a folder with no rule: give it its place"
    assert _upward(graph) == []


def test_the_rules_themselves_run_one_way() -> None:
    """The rooms' rules allow no cycle between rooms either."""
    assert _cycles({room: set(allowed) for room, allowed in MAY_IMPORT.items()}) == []


def test_the_checker_finds_a_cycle_and_an_import_for_type_checking_counts() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from coordinator.heart import ledger\n"
        "def f():\n    from coordinator.model import orders\n"
    )
    modules = {"coordinator.heart.ledger": Path(), "coordinator.model.orders": Path()}
    assert _imports(tree, modules, "x") == {"coordinator.heart.ledger", "coordinator.model.orders"}


@pytest.mark.parametrize(
    ("planted", "imported"),
    [
        # A value type reaching up for behaviour: the shape that tied the heart into a circle.
        ("coordinator.model.orders", "coordinator.heart.dispatch"),
        # The same, behind TYPE_CHECKING.
        ("coordinator.streams.presence", "coordinator.fleet.service"),
    ],
)
def test_a_planted_upward_import_is_found(planted: str, imported: str) -> None:
    graph = _graph()
    graph[planted] = graph[planted] | {imported}
    assert any(line.startswith(f"{planted} -> {imported}") for line in _upward(graph))
    assert _cycles(graph) != []
