"""No import cycles inside a package, counting every import a module makes.

A cycle hidden behind ``if TYPE_CHECKING:`` or an import inside a function still ties the two
modules together (neither can be read, moved or tested without the other, and a lazy import
that runs at the wrong moment finds a half-initialised module). The graph here therefore
counts every intra-package import wherever it is written: at module level, under
``TYPE_CHECKING``, inside functions and classes. A type both sides need lives in a lower
module that both import.

Edges: ``from .a import x`` and ``import pkg.a`` reach module ``a`` (and ``a.x`` if that is a
submodule); ``from . import x`` reaches submodule ``x``, or the package's ``__init__`` if ``x``
is a name defined there. The parent package that Python imports on the way is not an edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "opreg_core": ROOT / "packages" / "opreg-core" / "src" / "opreg_core",
    "opreg_kernels": ROOT / "packages" / "opreg-kernels" / "src" / "opreg_kernels",
    "opreg_testing": ROOT / "packages" / "opreg-testing" / "src" / "opreg_testing",
}


def _modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package under ``root``, by dotted name (a package by its own)."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(importer: str, is_package: bool, module: str | None, level: int) -> str | None:
    """The absolute module a ``from ... import`` names (``module`` relative at ``level``)."""
    if level == 0:
        return module
    base = importer.split(".")
    if not is_package:
        base.pop()
    if level > 1:
        base = base[: len(base) - (level - 1)]
    if not base:
        return None
    return ".".join([*base, module]) if module else ".".join(base)


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports, anywhere in its source."""
    modules = _modules(root, package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node.module, node.level)
                if base is None:
                    continue
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in modules else base)
            for target in targets:
                # ``import pkg.a.b`` reaches pkg.a.b; keep the longest prefix that is a module.
                while target not in modules and "." in target:
                    target = target.rpartition(".")[0]
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: each strongly connected component of more than one module, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def mutual_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Pairs of modules that import each other."""
    return sorted((a, b) for a in graph for b in graph[a] if a < b and a in graph.get(b, ()))


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_two_modules_import_each_other(package: str) -> None:
    assert mutual_imports(import_graph(PACKAGES[package], package)) == []


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_import_cycles(package: str) -> None:
    assert cycles(import_graph(PACKAGES[package], package)) == []


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = import_graph(PACKAGES["opreg_core"], "opreg_core")
    assert "opreg_core._registry" in graph["opreg_core"]  # from ._registry import ...
    assert len(graph) == len(list(PACKAGES["opreg_core"].rglob("*.py")))


def _fake_package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "fakepkg"
    for rel, text in {"__init__.py": "", **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize(
    "b_imports_a",
    [
        "from .a import A\n",
        "import fakepkg.a\n",
        "from . import a\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n",
        "def f():\n    from .a import A\n    return A\n",
        "class C:\n    def m(self):\n        from fakepkg import a\n",
    ],
    ids=["from-relative", "import-absolute", "from-dot", "type-checking", "function", "method"],
)
def test_a_planted_mutual_import_is_found(tmp_path: Path, b_imports_a: str) -> None:
    root = _fake_package(
        tmp_path, {"a.py": "from .b import B\nA = 1\n", "b.py": b_imports_a + "B = 2\n"}
    )
    graph = import_graph(root, "fakepkg")
    assert mutual_imports(graph) == [("fakepkg.a", "fakepkg.b")]
    assert cycles(graph) == [["fakepkg.a", "fakepkg.b"]]


def test_a_longer_cycle_is_found_and_a_chain_is_not(tmp_path: Path) -> None:
    files = {
        "a.py": "from .b import B\n",
        "b.py": "from .sub.c import C\nB = 1\n",
        "sub/__init__.py": "",
        "sub/c.py": "def f():\n    from ..a import f\n",
        "d.py": "from .a import f\nfrom .sub import c\n",
    }
    graph = import_graph(_fake_package(tmp_path, files), "fakepkg")
    assert mutual_imports(graph) == []
    assert cycles(graph) == [["fakepkg.a", "fakepkg.b", "fakepkg.sub.c"]]
    files["sub/c.py"] = "X = 1\n"
    graph = import_graph(_fake_package(tmp_path, files), "fakepkg")
    assert cycles(graph) == []
    assert graph["fakepkg.d"] == {"fakepkg.a", "fakepkg.sub.c"}


def test_a_name_from_the_package_init_is_an_edge_to_it(tmp_path: Path) -> None:
    files = {"__init__.py": "from .a import A\nX = 1\n", "a.py": "from . import X\nA = 1\n"}
    graph = import_graph(_fake_package(tmp_path, files), "fakepkg")
    assert cycles(graph) == [["fakepkg", "fakepkg.a"]]
