"""Each package touches torch and Triton internals in one place, its boundary: ``_private.py``,
or every module of a ``_private/`` package (a list in ``__init__.py``, one module per concern).

A torch or Triton upgrade that drops an internal breaks in one obvious place: the first test
names every entry of a package's ``INTERNALS`` that no longer resolves (:func:`resolves`, the
one resolver: only tests call it, so it lives here, not in the packages); the second finds
every internal used outside the boundary (by file and line), so the boundary stays the only
one. An internal is found two ways:

- by name: a torch/Triton path reaching a private name (``torch._C``, ``x._y``) or an internal
  Triton package (``triton.runtime``), through imports and attribute chains;
- by use: an object that came from the boundary has one of its internal attributes
  (:data:`INTERNAL_ATTRIBUTES`, or any underscore attribute) read or written outside the
  boundary, e.g. ``layer.best_config = config`` on an autotuner that ``triton_kernel_layers``
  returned. "Came from the boundary" is a data flow over one module (:class:`_FromBoundary`):
  a name imported from ``_private`` or one of its modules (or an attribute of such a module),
  what calling one returns, its attributes and items, what iterating or unpacking one gives, a
  parameter annotated with (or an ``isinstance`` check against) an internal class, followed
  through local names, ``self`` attributes, and the parameters and returns of the module's own
  functions and methods.
"""

from __future__ import annotations

import ast
import dis
import functools
import importlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import CodeType, FunctionType
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "opreg_core": ROOT / "packages" / "opreg-core" / "src" / "opreg_core",
    "opreg_kernels": ROOT / "packages" / "opreg-kernels" / "src" / "opreg_kernels",
    "opreg_testing": ROOT / "packages" / "opreg-testing" / "src" / "opreg_testing",
}
#: A package's boundary: the module ``_private.py``, or the package ``_private/`` (every module
#: in it), at the package's root.
BOUNDARY = "_private"
#: Top-level modules whose private names must stay behind the boundary.
GUARDED = ("torch", "triton")
#: Triton subpackages that are internals as a whole (their names carry no underscore).
TRITON_INTERNAL_PACKAGES = ("triton.runtime", "triton.compiler", "triton.backends")

#: Attributes of torch/Triton objects that are internals although their names carry no
#: underscore (each with its owner). On an object that came from the boundary, reading or
#: writing one outside the boundary is a violation, as is any underscore attribute.
#: Every ``Class.attribute`` entry of the packages' ``INTERNALS`` must be here (a test checks).
INTERNAL_ATTRIBUTES: dict[str, str] = {
    "best_config": "triton Autotuner",
    "base_fn": "triton Autotuner",
    "cache": "triton Autotuner",
    "configs": "triton Autotuner",
    "keys": "triton Autotuner",
    "arg_names": "triton Autotuner/Heuristics",
    "values": "triton Heuristics",
    "device_caches": "triton JITFunction",
    "pre_run_hooks": "triton JITFunction",
    "run": "triton CompiledKernel",
    "function": "triton CompiledKernel",
    "packed_metadata": "triton CompiledKernel",
    "launch": "triton CudaLauncher",
    "global_scratch_size": "triton CudaLauncher",
    "profile_scratch_size": "triton CudaLauncher",
    "launch_cooperative_grid": "triton CudaLauncher",
    "launch_pdl": "triton CudaLauncher",
    "arg_annotations": "triton CudaLauncher (3.8+ layout)",
    "kernel_signature": "triton CudaLauncher (3.8+ layout)",
    "gsan_enabled": "triton CudaLauncher (3.8+ layout)",
    "calls": "triton HookChain",
    "default": "triton DriverConfig",
    "set_active": "triton DriverConfig",
    "get_benchmarker": "triton driver",
    "randomness": "torch CVmapInterpreterPtr",
    "prevFwdGradMode": "torch CJvpInterpreterPtr",
    "raw_repr": "torch DispatchKeySet",
    "from_raw_repr": "torch DispatchKeySet",
    "from_tensor": "torch FakeTensorMode",
    "propagate_op_sharding": "torch ShardingPropagator",
}
#: Of those, data attributes whose names dicts also carry as methods: a read is a violation,
#: a call (a dict's ``.keys()``/``.values()``) is not.
DATA_ATTRIBUTES = frozenset({"keys", "values"})


# -- which internals exist --------------------------------------------------------------------


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` names something in the running torch/Triton.

    The longest importable prefix is imported and the rest read as attributes. Past a
    function come the names of a function nested in it, then of that one's closure
    variables (``Autotuner._bench.kernel_call.config``). An attribute that only instances
    have counts, as the last name, when a method of the class (or of a base) assigns it.
    """
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        return _follows(module, parts[cut:])
    return False


def _follows(obj: Any, names: list[str]) -> bool:
    for i, name in enumerate(names):
        last = i == len(names) - 1
        if isinstance(obj, (FunctionType, CodeType)):
            code = obj.__code__ if isinstance(obj, FunctionType) else obj
            nested = [c for c in code.co_consts if isinstance(c, CodeType) and c.co_name == name]
            if nested:
                obj = nested[0]
                continue
            if name in code.co_freevars:
                return last  # a closure variable: nothing below it can be followed
        if hasattr(obj, name):
            obj = getattr(obj, name)
            continue
        return last and isinstance(obj, type) and _assigned_by_a_method(obj, name)
    return True


def _assigned_by_a_method(cls: type, attribute: str) -> bool:
    """Whether a method of ``cls`` or of a base (or a function nested in one) assigns
    ``self.<attribute>``."""
    for klass in cls.__mro__:
        for member in vars(klass).values():
            code = getattr(getattr(member, "__func__", member), "__code__", None)
            if isinstance(code, CodeType) and _stores_attribute(code, attribute):
                return True
    return False


def _stores_attribute(code: CodeType, attribute: str) -> bool:
    if any(i.opname == "STORE_ATTR" and i.argval == attribute for i in dis.get_instructions(code)):
        return True
    return any(isinstance(c, CodeType) and _stores_attribute(c, attribute) for c in code.co_consts)


@functools.cache
def _triton_imports() -> bool:
    try:
        import triton  # noqa: F401
    except Exception:  # absent or broken: its internals are not used either
        return False
    return True


def needed_here(dotted: str) -> bool:
    """Whether this build takes the code paths that use ``dotted``: torch's CUDA functions only
    in builds with CUDA (or ROCm), Triton's names only where Triton imports, torch.distributed
    names only where it is built in."""
    if dotted.startswith("torch._C._cuda"):
        return torch.version.cuda is not None or torch.version.hip is not None
    if dotted.split(".")[0] == "triton":
        return _triton_imports()
    if dotted.startswith("torch.distributed."):
        return torch.distributed.is_available()
    return True


def missing_internals(internals: Iterable[str]) -> list[str]:
    """The internals this torch/Triton lacks, of those it needs (empty: all present)."""
    return [name for name in internals if needed_here(name) and not resolves(name)]


# -- internals used by name ---------------------------------------------------------------


def _private_part(dotted: str) -> bool:
    """Whether a dotted torch/Triton path reaches a private name (``torch._C``, ``x._y``)."""
    parts = dotted.split(".")
    if parts[0] not in GUARDED:
        return False
    if any(_private_name(p) for p in parts):
        return True
    return any(dotted == p or dotted.startswith(p + ".") for p in TRITON_INTERNAL_PACKAGES)


def _private_name(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


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


def _named_violations(tree: ast.Module, name: str) -> Iterator[str]:
    # Local names bound to torch/triton modules: `import torch`, `import triton.language as tl`.
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _private_part(alias.name):
                    yield f"{name}:{node.lineno}: import {alias.name}"
                if alias.name.split(".")[0] in GUARDED:
                    aliases[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0]
                    )
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if _private_part(node.module) or _private_part(full):
                    yield f"{name}:{node.lineno}: from {node.module} import {alias.name}"
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
                yield f"{name}:{node.lineno}: {dotted}"


# -- internals used through objects from the boundary ------------------------------------------

_Scope = ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
_Function = ast.FunctionDef | ast.AsyncFunctionDef


@functools.cache
def internal_classes() -> frozenset[str]:
    """Names of the torch/Triton classes the packages' ``INTERNALS`` name (``Autotuner``,
    ``OpOverload``, ...): a parameter annotated with one holds an internal object."""
    names: set[str] = set()
    for package in PACKAGES:
        for entry in importlib.import_module(f"{package}._private").INTERNALS:
            names.update(p for p in entry.split(".") if p[:1].isupper() and not p.isupper())
    return frozenset(names)


def _boundary_module(dotted: str) -> bool:
    """Whether a module path names the boundary or one of its modules: ``_private``,
    ``_private.vmap``, ``opreg_x._private``, ``opreg_x._private.launch``."""
    return BOUNDARY in dotted.split(".")


def _from_boundary_module(node: ast.ImportFrom) -> bool:
    """``from ._private import x``, ``from .._private import x``, ``from ._private.vmap import
    x``, ``from opreg_x._private ...``."""
    return _boundary_module(node.module or "")


class _FromBoundary:
    """Which expressions of one module hold objects that came from the boundary."""

    def __init__(self, tree: ast.Module, classes: frozenset[str]) -> None:
        self.tree = tree
        self.classes = classes
        self.scope_of: dict[int, _Scope] = {}
        self.parent: dict[int, ast.AST] = {}
        self.bound: dict[int, set[str]] = {id(tree): set()}  # scope -> names bound in it
        self.enclosing: dict[int, _Scope | None] = {id(tree): None}
        self.defs: dict[tuple[int, str], list[_Function]] = {}  # (scope, name) -> functions
        self.methods: dict[tuple[int, str], list[_Function]] = {}  # (class, name) -> methods
        self.self_of: dict[int, tuple[int, str]] = {}  # method -> (class, its first parameter)
        self.modules: set[tuple[int, str]] = set()  # names bound to a `_private` module
        self.names: set[tuple[int, str]] = set()  # names holding objects from the boundary
        self.attributes: set[tuple[int, str]] = set()  # (class, attribute of self) likewise
        self.returns: set[int] = set()  # functions returning objects from the boundary
        self._index(tree, tree)
        while self._propagate():
            pass

    # The structure: scopes, bound names, functions and methods.
    def _index(self, node: ast.AST, scope: _Scope) -> None:
        for child in ast.iter_child_nodes(node):
            self.parent[id(child)] = node
            self.scope_of[id(child)] = scope
            inner = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inner = child
                self.enclosing[id(child)] = scope
                self.bound[id(child)] = {
                    a.arg for a in self._parameters(child) + self._variadic(child)
                }
                if not isinstance(child, ast.Lambda):
                    self.bound[id(scope)].add(child.name)
                    if isinstance(node, ast.ClassDef):
                        self.methods.setdefault((id(node), child.name), []).append(child)
                        params = self._parameters(child)
                        if params:
                            self.self_of[id(child)] = (id(node), params[0].arg)
                    else:
                        self.defs.setdefault((id(scope), child.name), []).append(child)
            elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                self.bound[id(scope)].add(child.id)
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                for alias in child.names:
                    local = alias.asname or alias.name.split(".")[0]
                    self.bound[id(scope)].add(local)
                    if isinstance(child, ast.ImportFrom) and _from_boundary_module(child):
                        self.names.add((id(scope), local))
                    elif _boundary_module(alias.name) and (
                        alias.asname or isinstance(child, ast.ImportFrom)
                    ):
                        self.modules.add((id(scope), local))
            elif isinstance(child, ast.ClassDef):
                self.bound[id(scope)].add(child.name)
            self._index(child, inner)

    @staticmethod
    def _parameters(fn: _Scope) -> list[ast.arg]:
        assert not isinstance(fn, ast.Module)
        a = fn.args
        return [*a.posonlyargs, *a.args, *a.kwonlyargs]

    @staticmethod
    def _variadic(fn: _Scope) -> list[ast.arg]:
        assert not isinstance(fn, ast.Module)
        return [v for v in (fn.args.vararg, fn.args.kwarg) if v is not None]

    def _lookup(self, name: str, scope: _Scope | None) -> tuple[int, str]:
        """The binding a name refers to in ``scope``: the innermost scope binding it."""
        while scope is not None:
            if name in self.bound[id(scope)]:
                return id(scope), name
            scope = self.enclosing[id(scope)]
        return id(self.tree), name

    def _self_class(self, node: ast.expr) -> int | None:
        """The class whose instance ``node`` is, when it is a method's ``self``."""
        if not isinstance(node, ast.Name):
            return None
        key = self._lookup(node.id, self.scope_of[id(node)])
        found = self.self_of.get(key[0])
        return found[0] if found is not None and found[1] == node.id else None

    # What holds an object from the boundary.
    def holds(self, node: ast.AST | None) -> bool:
        if isinstance(node, ast.Name):
            return self._lookup(node.id, self.scope_of[id(node)]) in self.names
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name):
                key = self._lookup(node.value.id, self.scope_of[id(node)])
                if key in self.modules:
                    return True
                cls = self._self_class(node.value)
                if cls is not None:
                    return (cls, node.attr) in self.attributes
            return self.holds(node.value)
        if isinstance(node, ast.Call):
            if _constant_getattr(node) is not None:
                return self.holds(node.args[0])
            if self.holds(node.func):
                return True
            return any(id(fn) in self.returns for fn, _ in self._callees(node))
        if isinstance(node, (ast.Subscript, ast.Starred, ast.Await, ast.NamedExpr)):
            return self.holds(node.value)
        if isinstance(node, ast.IfExp):
            return self.holds(node.body) or self.holds(node.orelse)
        if isinstance(node, ast.BoolOp):
            return any(self.holds(v) for v in node.values)
        return False

    def _callees(self, call: ast.Call) -> list[tuple[_Function, int]]:
        """The module's own functions a call may run, each with the number of its leading
        parameters the call does not pass (1 for ``self.method(...)``)."""
        func = call.func
        if isinstance(func, ast.Name):
            key = self._lookup(func.id, self.scope_of[id(func)])
            return [(fn, 0) for fn in self.defs.get(key, [])]
        if isinstance(func, ast.Attribute):
            cls = self._self_class(func.value)
            if cls is not None:
                return [(fn, 1) for fn in self.methods.get((cls, func.attr), [])]
        return []

    def _annotated(self, annotation: ast.expr | None, parsed: bool = False) -> bool:
        """Whether an annotation names an internal class (or a class from the boundary):
        ``Autotuner``, ``OpOverload[Any, Any]``, ``"Heuristics | None"``."""
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                return self._annotated(ast.parse(annotation.value, mode="eval").body, True)
            except SyntaxError:
                return False
        if isinstance(annotation, ast.BinOp):  # X | None
            return self._annotated(annotation.left, parsed) or self._annotated(
                annotation.right, parsed
            )
        if isinstance(annotation, ast.Subscript):  # OpOverload[Any, Any]
            return self._annotated(annotation.value, parsed)
        if not isinstance(annotation, (ast.Name, ast.Attribute)):
            return False
        if self._class_name(annotation):
            return True
        return not parsed and self.holds(annotation)  # a parsed string has no scope

    def _class_name(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr in self.classes
        return isinstance(node, ast.Name) and node.id in self.classes

    def _bind(self, target: ast.expr) -> None:
        """``target`` now holds an object from the boundary."""
        if isinstance(target, ast.Name):
            self.names.add(self._lookup(target.id, self.scope_of[id(target)]))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._bind(element)
        elif isinstance(target, ast.Starred):
            self._bind(target.value)
        elif isinstance(target, ast.Attribute):
            cls = self._self_class(target.value)
            if cls is not None:
                self.attributes.add((cls, target.attr))

    def _propagate(self) -> bool:
        """One pass over the module; whether it found anything new."""
        before = len(self.names) + len(self.attributes) + len(self.returns)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and self.holds(node.value):
                for target in node.targets:
                    self._bind(target)
            elif isinstance(node, ast.AnnAssign):
                if self.holds(node.value) or self._annotated(node.annotation):
                    self._bind(node.target)
            elif isinstance(node, ast.NamedExpr):
                if self.holds(node.value):
                    self._bind(node.target)
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                if self.holds(node.iter):
                    self._bind(node.target)
            elif isinstance(node, ast.withitem):
                if node.optional_vars is not None and self.holds(node.context_expr):
                    self._bind(node.optional_vars)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                for arg in self._parameters(node):
                    if self._annotated(arg.annotation):
                        self.names.add((id(node), arg.arg))
                if isinstance(node, ast.Lambda) and self.holds(node.body):
                    self.returns.add(id(node))
            elif isinstance(node, ast.Return) and self.holds(node.value):
                function = self.scope_of[id(node)]
                self.returns.add(id(function))
            elif isinstance(node, ast.Call):
                self._call(node)
        return len(self.names) + len(self.attributes) + len(self.returns) > before

    def _call(self, call: ast.Call) -> None:
        func = call.func
        if isinstance(func, ast.Name) and func.id == "isinstance" and len(call.args) == 2:
            checked, against = call.args
            kinds = against.elts if isinstance(against, ast.Tuple) else [against]
            if isinstance(checked, ast.Name) and any(
                self._class_name(k) or self.holds(k) for k in kinds
            ):
                self._bind(checked)
        for fn, skipped in self._callees(call):
            params = self._parameters(fn)[skipped:]
            for position, arg in enumerate(call.args):
                if isinstance(arg, ast.Starred):
                    break
                if position < len(params) and self.holds(arg):
                    self.names.add((id(fn), params[position].arg))
            for keyword in call.keywords:
                if keyword.arg is not None and self.holds(keyword.value):
                    self.names.add((id(fn), keyword.arg))

    # What is a violation.
    def violations(self, name: str) -> Iterator[str]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Attribute):
                receiver, attribute = node.value, node.attr
                called = isinstance(self.parent.get(id(node)), ast.Call) and (
                    self.parent[id(node)].func is node  # type: ignore[attr-defined]
                )
            elif isinstance(node, ast.Call) and (name_given := _constant_getattr(node)):
                receiver, attribute, called = node.args[0], name_given, False
            else:
                continue
            if not _internal_attribute(attribute, called) or not self.holds(receiver):
                continue
            owner = INTERNAL_ATTRIBUTES.get(attribute, "a torch/Triton object")
            yield (
                f"{name}:{node.lineno}: .{attribute} of {ast.unparse(receiver)} "
                f"(an internal of {owner}, on an object from the boundary)"
            )


def _constant_getattr(call: ast.Call) -> str | None:
    """``name`` of ``getattr(x, "name"[, default])``/``setattr``/``hasattr``/``delattr``."""
    if (
        isinstance(call.func, ast.Name)
        and call.func.id in ("getattr", "setattr", "hasattr", "delattr")
        and len(call.args) >= 2
        and isinstance(call.args[1], ast.Constant)
        and isinstance(call.args[1].value, str)
    ):
        return call.args[1].value
    return None


def _internal_attribute(attribute: str, called: bool) -> bool:
    if _private_name(attribute):
        return True
    if attribute in DATA_ATTRIBUTES:
        return not called
    return attribute in INTERNAL_ATTRIBUTES


# -- the scan ----------------------------------------------------------------------------------


def violations_in(source: str, name: str = "mod.py") -> list[str]:
    """Every internal a module's ``source`` uses outside the boundary, by name or by use."""
    tree = ast.parse(source, filename=name)
    found = list(_named_violations(tree, name))
    found += _FromBoundary(tree, internal_classes()).violations(name)
    return found


def _violations(path: Path) -> list[str]:
    return violations_in(path.read_text(), path.name)


def in_boundary(path: Path, root: Path) -> bool:
    """Whether ``path`` (a module of the package at ``root``) is inside its boundary."""
    return path == root / f"{BOUNDARY}.py" or root / BOUNDARY in path.parents


def _boundary_name(package: str) -> str:
    folder = PACKAGES[package] / BOUNDARY
    return f"{package}/{BOUNDARY}/" if folder.is_dir() else f"{package}/{BOUNDARY}.py"


def modules_outside(root: Path) -> list[Path]:
    """The modules of the package at ``root`` that are outside its boundary."""
    return sorted(p for p in root.rglob("*.py") if not in_boundary(p, root))


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_every_internal_resolves(package: str) -> None:
    boundary = importlib.import_module(f"{package}._private")
    assert boundary.INTERNALS, f"{package}._private lists no internals"
    missing = missing_internals(boundary.INTERNALS)
    assert not missing, (
        f"{package} relies on internals this torch/Triton does not have: {', '.join(missing)}; "
        f"adapt {_boundary_name(package)} (each entry says which public API would replace it)"
    )


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_internals_outside_the_boundary(package: str) -> None:
    found = [v for path in modules_outside(PACKAGES[package]) for v in _violations(path)]
    assert not found, (
        f"torch/Triton internals outside {_boundary_name(package)} (move them there, as a named "
        "function with a comment saying why and which public API would replace it):\n  "
        + "\n  ".join(found)
    )


def test_every_internal_attribute_the_packages_list_is_guarded() -> None:
    """An ``INTERNALS`` entry ``...Class.attribute`` is an attribute the by-use scan must know."""
    unguarded = []
    for package in PACKAGES:
        for entry in importlib.import_module(f"{package}._private").INTERNALS:
            *_, owner, attribute = entry.split(".")
            listed = attribute in INTERNAL_ATTRIBUTES
            if owner[:1].isupper() and attribute[:1].islower() and not listed:
                unguarded.append(entry)
    assert not unguarded, f"add to INTERNAL_ATTRIBUTES: {unguarded}"


def test_the_boundary_is_the_private_module_or_every_module_of_the_private_package(
    tmp_path: Path,
) -> None:
    """Inside: ``_private.py`` and everything under ``_private/`` at the package's root; outside:
    every other module, a subpackage's own ``_private`` included."""
    inside = ["_private.py", "_private/__init__.py", "_private/vmap.py", "_private/deep/x.py"]
    outside = ["__init__.py", "a.py", "checks/_private.py", "checks/_private/x.py", "_privates.py"]
    for rel in inside + outside:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert {p.relative_to(tmp_path).as_posix() for p in modules_outside(tmp_path)} == set(outside)
    assert all(in_boundary(tmp_path / rel, tmp_path) for rel in inside)


# -- the resolver itself -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("torch._C._dispatch_key_for_device", True),
        ("torch._C._opreg_no_such_function", False),
        ("torch._C._no_such_function", False),
        ("opreg_no_such_module.attr", False),
        ("torch._no_such_module.thing", False),
        ("torch._ops.OpOverload._op", True),  # only on instances: __init__ assigns it
        ("torch._ops.OpOverload._never_assigned", False),
        ("torch._ops.OpOverload._op.deeper", False),  # nothing to follow below an instance one
        ("torch._ops.OpOverloadPacket._qualified_op_name", True),
        ("torch._library.custom_ops.CustomOpDef._opoverload", True),
        ("triton.compiler.CompiledKernel.run", True),
        ("triton.compiler.CompiledKernel.packed_metadata", True),  # set by a method
        ("triton.compiler.CompiledKernel.opreg_no_such_attribute", False),
        ("triton.knobs.runtime.launch_enter_hook.calls", True),
        ("triton.runtime.autotuner.Autotuner.best_config", True),  # set by run()
        ("triton.runtime.autotuner.Autotuner._bench.kernel_call.config", True),  # a closure name
        ("triton.runtime.autotuner.Autotuner._bench.kernel_call.opreg_nothing", False),
        ("triton.runtime.autotuner.Autotuner._bench.opreg_no_such_function", False),
    ],
)
def test_the_resolver_finds_what_is_missing(name: str, expected: bool) -> None:
    if name.startswith("triton"):
        pytest.importorskip("triton")
    assert resolves(name) is expected


def test_an_instance_attribute_is_not_a_class_attribute() -> None:
    """What the instance-attribute rule is for: ``OpOverload._op`` is absent from the class."""
    from torch._ops import OpOverload

    assert not hasattr(OpOverload, "_op")
    assert resolves("torch._ops.OpOverload._op")


def test_missing_internals_names_what_lacks_and_what_this_build_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lacking = ["torch._ops.OpOverload._no_such_attribute", "torch._C._no_such_function"]
    cuda_only = "torch._C._cuda_opreg_no_such_function"
    listed = ["torch._C.parse_schema", *lacking, cuda_only]
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None)
    assert missing_internals(listed) == lacking  # no CUDA here: its functions are not needed
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    assert missing_internals(listed) == [*lacking, cuda_only]


# -- the scan itself ---------------------------------------------------------------------------


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
def test_scanner_catches_private_names(source: str, expected: int) -> None:
    """The scan by name: it must find what it is meant to find, and nothing public."""
    assert len(violations_in(source)) == expected


_LAYERS = "from ._private import triton_kernel_layers, autotuner_config\n"


@pytest.mark.parametrize(
    ("source", "lines"),
    [
        # The shapes of the kernel sites this scan was written for.
        (
            _LAYERS + "layers, inner, compiled = triton_kernel_layers(k)\n"
            "for is_autotuner, layer in layers:\n"
            "    layer.best_config = autotuner_config(layer, (), {})\n",
            [4],
        ),
        (
            _LAYERS + "class Fast:\n"
            "    def __init__(self, kernel):\n"
            "        found = triton_kernel_layers(kernel)\n"
            "        self._layers = found[0]\n"
            "    def run(self, args):\n"
            "        for _, layer in self._layers:\n"
            "            named = dict(zip(layer.arg_names, args))\n"
            "            for n, h in layer.values.items():\n"
            "                named[n] = h(named)\n",
            [8, 9],
        ),
        (
            "from ._private import autotune_benchmark_call\n"
            "def name(autotuner):\n"
            "    return getattr(autotuner, 'base_fn', None)\n"
            "def bench(call):\n"
            "    autotuner, config, args = autotune_benchmark_call(call)\n"
            "    return name(autotuner)\n",
            [3],
        ),
        (
            "from ._private import triton_default_driver\n"
            "own = triton_default_driver().get_benchmarker()\n",
            [2],
        ),
        (
            "from ._private import CVmapInterpreterPtr, peek_interpreter_stack\n"
            "r = CVmapInterpreterPtr(peek_interpreter_stack()).randomness()\n",
            [2],
        ),
        # Through a module-level object, a `_private` module, a returning helper, a walrus.
        ("from opreg_kernels import _private\n_private.thing.best_config\n", [2]),
        ("from . import _private as p\nx = p.f()\nx.cache\n", [3]),
        (
            "from .._private import make\nLAYER = make()\n"
            "def get():\n    return LAYER\n"
            "def use():\n    return get().configs\n",
            [6],
        ),
        ("from ._private import f\nif (x := f()) is not None:\n    x.device_caches\n", [3]),
        # Objects known by their type: an annotation or an isinstance check.
        ("def f(layer: Autotuner):\n    layer.best_config = None\n", [2]),
        ("def f(layer: 'Heuristics | None'):\n    return layer.arg_names\n", [2]),
        (
            "from triton.runtime import Autotuner\n"
            "def f(k):\n    if isinstance(k, Autotuner):\n        return k.keys\n",
            [1, 4],  # the import of triton.runtime, and the read
        ),
        (
            "from ._private import OpOverload\ndef f(op: OpOverload[Any, Any]):\n    op._schema\n",
            [3],
        ),
        # An underscore attribute of an object from the boundary.
        ("from ._private import vmap_level_keys\nvmap_level_keys()._last\n", [2]),
        # A name imported from a module of a `_private/` package, or such a module itself.
        (
            "from ._private.jit import triton_kernel_layers\n"
            "layers, inner, compiled = triton_kernel_layers(k)\n"
            "for is_autotuner, layer in layers:\n"
            "    layer.best_config = None\n",
            [4],
        ),
        ("from .._private.vmap_short_paths import vmap_level_keys\nvmap_level_keys()._last\n", [2]),
        ("import opreg_kernels._private.driver as d\nd.triton_default_driver().default\n", [2]),
        ("from opreg_kernels._private import autotune\nautotune.f().configs\n", [2]),
    ],
)
def test_scanner_follows_objects_from_the_boundary(source: str, lines: list[int]) -> None:
    """The scan by use: internals reached through objects (mutants of the real sites)."""
    found = violations_in(source)
    assert sorted(int(v.split(":")[1]) for v in found) == lines, found


@pytest.mark.parametrize(
    "source",
    [
        # Public attributes of objects from the boundary, and plain objects.
        "from ._private import autotuner_config\nc = autotuner_config(a, (), {})\n"
        "c.pre_hook\nc.all_kwargs()\n",
        "from ._private import overload_schema\nfor a in overload_schema(op).arguments:\n"
        "    a.name\n",
        "from ._private import tree_leaves\nfor t in tree_leaves(x):\n    t.values()\n",
        "from ._private import f\nd = f()\nd.keys()\nd.values()\n",  # a dict's methods
        "def f(layer):\n    layer.best_config = None\n",  # not known to come from the boundary
        "class A:\n    def __init__(self):\n        self.cache = {}\n    def f(self):\n"
        "        return self.cache\n",
        "from ._private import f\ndef g(x):\n    return x.configs\ng(1)\nf()\n",
        "from ._private import f\ndef g():\n    x = f()\n    return x\ndef h():\n"
        "    x = {}\n    return x.keys\n",  # another scope's `x`
        "import triton\ndef f(k: triton.JITFunction):\n    return k.fn\n",
        "from ._private import f\ngetattr(f(), name)\n",  # a dynamic name: not followed
    ],
)
def test_scanner_leaves_public_uses_alone(source: str) -> None:
    assert violations_in(source) == []
