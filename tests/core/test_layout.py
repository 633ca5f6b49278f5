"""The layout of opreg_core: its modules import each other without a cycle.

Every import counts (module level and inside functions, where a lazy import hides a cycle from
Python but not from a reader), except those under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import opreg_core

PACKAGE = Path(opreg_core.__file__).parent


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
    )


def _imported_modules(source: str, modules: set[str], level: int = 1) -> set[str]:
    """The opreg_core modules that ``source`` imports at run time (``level``: the dots of a
    relative import of one, 2 in a subpackage)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking_only(node):
            for child in getattr(node, "orelse", []):
                visit(child)
            return
        if isinstance(node, ast.ImportFrom):
            absolute = node.level == 0 and (node.module or "").split(".")[0] == "opreg_core"
            if node.level == level or absolute:
                parts = (node.module or "").split(".")
                module = parts[1] if absolute and len(parts) > 1 else parts[0]
                if absolute and len(parts) == 1:
                    module = ""
                if module:
                    found.add(module)
                else:  # from . import x: a module, or a name of the package itself
                    for alias in node.names:
                        found.add(alias.name if alias.name in modules else "__init__")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "opreg_core":
                    found.add(parts[1] if len(parts) > 1 else "__init__")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module name -> the package modules it imports at run time (a subpackage, such as
    ``_private/``, is one module: what its modules import from outside it)."""
    subpackages = {p.parent.name: p.parent for p in package.glob("*/__init__.py")}
    modules = {p.stem for p in package.glob("*.py")} | set(subpackages)
    graph = {
        p.stem: _imported_modules(p.read_text(), modules) & modules - {p.stem}
        for p in package.glob("*.py")
    }
    for name, folder in subpackages.items():
        found = [_imported_modules(p.read_text(), modules, 2) for p in folder.rglob("*.py")]
        graph[name] = set().union(*found) & modules - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """A cycle of ``graph`` as a path ``[a, b, ..., a]``, or ``[]`` if it is acyclic."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def test_core_modules_import_each_other_without_a_cycle() -> None:
    graph = import_graph(PACKAGE)
    assert "_private" in graph and graph["_register"], graph  # the scan found the modules
    cycle = find_cycle(graph)
    assert not cycle, "import cycle in opreg_core: " + " -> ".join(cycle)


def test_only_init_imports_from_the_package_itself() -> None:
    graph = import_graph(PACKAGE)
    assert [m for m, targets in graph.items() if "__init__" in targets] == []


def test_the_scan_sees_lazy_imports_and_skips_type_checking_ones() -> None:
    modules = {"_a", "_b", "_c"}
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import _a\n"
        "if TYPE_CHECKING:\n    from ._b import B\n"
        "def f():\n    from ._c import C\n"
    )
    assert _imported_modules(source, modules) == {"_a", "_c"}
    assert find_cycle({"_a": {"_b"}, "_b": {"_c"}, "_c": {"_a"}}) == ["_a", "_b", "_c", "_a"]
    assert find_cycle({"_a": {"_b"}, "_b": set(), "_c": {"_a", "_b"}}) == []
