"""Each package touches torch and Triton internals in one module, ``_private.py``.

A torch or Triton upgrade that drops an internal breaks in one obvious place: the first test
names every internal that no longer resolves; the second finds any private name used outside
the boundary module (by file and line), so the boundary stays the only one.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "opreg_core": ROOT / "packages" / "opreg-core" / "src" / "opreg_core",
    "opreg_kernels": ROOT / "packages" / "opreg-kernels" / "src" / "opreg_kernels",
    "opreg_testing": ROOT / "packages" / "opreg-testing" / "src" / "opreg_testing",
}
BOUNDARY = "_private.py"
#: Top-level modules whose private names must stay behind the boundary.
GUARDED = ("torch", "triton")
#: Triton subpackages that are internals as a whole (their names carry no underscore).
TRITON_INTERNAL_PACKAGES = ("triton.runtime", "triton.compiler", "triton.backends")


def _private_part(dotted: str) -> bool:
    """Whether a dotted torch/Triton path reaches a private name (``torch._C``, ``x._y``)."""
    parts = dotted.split(".")
    if parts[0] not in GUARDED:
        return False
    if any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts):
        return True
    return any(dotted == p or dotted.startswith(p + ".") for p in TRITON_INTERNAL_PACKAGES)


def _dotted(node: ast.expr) -> str | None:
    """``torch._C._x`` for an attribute chain rooted at a plain name, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _violations(path: Path) -> Iterator[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    # Local names bound to torch/triton modules: `import torch`, `import triton.language as tl`.
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _private_part(alias.name):
                    yield f"{path.name}:{node.lineno}: import {alias.name}"
                if alias.name.split(".")[0] in GUARDED:
                    aliases[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0]
                    )
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if _private_part(node.module) or _private_part(full):
                    yield f"{path.name}:{node.lineno}: from {node.module} import {alias.name}"
                elif node.module.split(".")[0] in GUARDED:
                    aliases[alias.asname or alias.name] = full
    # Each attribute chain once, at its outermost node (``torch._C._x``, not also ``torch._C``).
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            dotted = _dotted(node)
            if dotted is None:
                continue
            head, _, rest = dotted.partition(".")
            if head not in aliases:
                continue
            full = aliases[head] + ("." + rest if rest else "")
            if _private_part(full):
                yield f"{path.name}:{node.lineno}: {dotted}"


def _modules(package: str) -> list[Path]:
    return sorted(
        p
        for p in PACKAGES[package].rglob("*.py")
        if p.name != BOUNDARY or p.parent != PACKAGES[package]
    )


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_every_internal_resolves(package: str) -> None:
    boundary = importlib.import_module(f"{package}._private")
    assert boundary.INTERNALS, f"{package}._private lists no internals"
    missing = boundary.missing_internals()
    assert not missing, (
        f"{package} relies on internals this torch/Triton does not have: {', '.join(missing)}; "
        f"adapt {package}/_private.py (each entry says which public API would replace it)"
    )


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_internals_outside_the_boundary(package: str) -> None:
    found = [v for path in _modules(package) for v in _violations(path)]
    assert not found, (
        f"private torch/Triton names outside {package}/_private.py (move them there, with a "
        "comment saying why and which public API would replace them):\n  " + "\n  ".join(found)
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import torch\ntorch._C._dispatch_key_for_device('cpu')", 1),
        ("from torch._ops import OpOverload", 1),
        ("from torch.utils import _pytree", 1),
        ("import torch.utils._pytree as pytree", 1),
        ("from triton.runtime.jit import JITFunction", 1),
        ("import triton\ntriton.runtime.driver.active", 1),
        ("import torch as t\nt._dynamo.reset()", 1),
        ("from torch import _C", 1),
        ("import torch\ntorch.library.Library('x', 'FRAGMENT')", 0),
        ("import torch\ntorch.__version__", 0),
        ("import triton\nimport triton.language as tl\ntriton.cdiv(1, 2)\ntl.arange(0, 4)", 0),
        ("x = object()\nx._private_attr", 0),
    ],
)
def test_scanner_catches_private_names(tmp_path: Path, source: str, expected: int) -> None:
    """The scan itself: it must find what it is meant to find, and nothing public."""
    path = tmp_path / "mod.py"
    path.write_text(source)
    assert len(list(_violations(path))) == expected
