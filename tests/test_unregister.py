"""``unregister`` leaves nothing of an op behind, and a re-registration of its name starts clean.

The packages keep per-op state in module-level tables (the registry, the DTensor rules) and in
torch (sharding strategies, compiler-visible ``__torch_dispatch__`` rules). Rather than list
those tables, the test finds them: it walks every module-level container of the three packages
(dicts, lists, sets, weak containers, context variables, and objects of the packages' own
classes held at module level) and looks for anything that mentions the test's unique op
namespace (a string, an operator or an opreg op). A table added later is covered without
touching this test.
"""

from __future__ import annotations

import functools
import importlib
import sys
import types
import weakref
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

import pytest
import torch

import opreg_core
import opreg_kernels
from opreg_core import _dtensor, register_vmap_op, unregister
from opreg_kernels import register_triton_op
from opreg_testing import OpNamespace

PACKAGES = ("opreg_core", "opreg_kernels", "opreg_testing")
_LAUNCHER = "opreg_kernels.ops.fused_add.triton_kernels:launch"
_MAX_DEPTH = 8


def _ours(obj: object) -> bool:
    """Whether ``obj``'s class is defined in one of the three packages."""
    return type(obj).__module__.split(".")[0] in PACKAGES


def _mentions(value: object, needle: str, depth: int, seen: set[int]) -> bool:
    """Whether ``value`` (followed through containers) holds a name, operator or op of the
    namespace ``needle``."""
    if depth > _MAX_DEPTH or id(value) in seen:
        return False
    seen.add(id(value))
    if isinstance(value, str):
        return needle in value
    if isinstance(value, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return needle in repr(value)  # an opreg op too (its repr names it)
    if isinstance(value, (types.ModuleType, type, types.FunctionType, torch.Tensor)):
        return False
    items: list[object] = []
    if isinstance(value, Mapping):  # the weak dictionaries too
        items = [x for kv in list(value.items()) for x in kv]
    elif isinstance(value, (list, tuple, set, frozenset, weakref.WeakSet)):
        items = list(value)
    elif isinstance(value, weakref.ref):
        items = [value()]
    elif isinstance(value, ContextVar):
        items = [value.get(None)]
    elif _ours(value) and hasattr(value, "__dict__"):
        items = list(vars(value).values())
    return any(_mentions(item, needle, depth + 1, seen) for item in items)


def _package_modules() -> Iterator[types.ModuleType]:
    for name, module in list(sys.modules.items()):
        if module is not None and name.split(".")[0] in PACKAGES:
            yield module


def tables_mentioning(needle: str) -> list[str]:
    """``module.name`` of every module-level value of the packages that mentions ``needle``."""
    found = []
    for module in _package_modules():
        for name, value in list(vars(module).items()):
            if name.startswith("__") or isinstance(value, types.ModuleType):
                continue
            if isinstance(value, type) and value.__module__ == module.__name__:
                # class-level tables: the class's own attributes
                hits = [
                    attr
                    for attr, v in vars(value).items()
                    if not attr.startswith("__") and _mentions(v, needle, 0, set())
                ]
                found += [f"{module.__name__}.{name}.{attr}" for attr in hits]
            elif _mentions(value, needle, 0, set()):
                found.append(f"{module.__name__}.{name}")
    return sorted(found)


def _lru_caches() -> dict[str, int]:
    """The sizes of the packages' module-level ``functools`` caches (their keys are hidden)."""
    sizes = {}
    for module in _package_modules():
        for name, value in vars(module).items():
            if isinstance(value, functools._lru_cache_wrapper):
                sizes[f"{module.__name__}.{name}"] = value.cache_info().currsize
    return sizes


def _dtensor_strategies() -> dict[Any, Any]:
    from torch.distributed.tensor import DTensor

    return DTensor._op_dispatcher.sharding_propagator.op_strategy_funcs


def _torch_dispatch_rule(qualname: str) -> object:
    from torch._subclasses.functional_tensor import FunctionalTensorMode

    return torch._library.simple_registry.singleton.find(qualname).torch_dispatch_rules.find(
        FunctionalTensorMode
    )


def _add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def _register_all(ns: str, *, extras: bool = True) -> list[opreg_core.VmapOp[Any, Any]]:
    """A plain op (with a sharding rule, an autocast rule and a vmap rule), a Triton op and a
    compiler-visible Triton op, all in ``ns``; ``extras=False`` registers the names again
    without the sharding rule, the autocast rule and the compiler-visible mode."""
    plain = register_vmap_op(
        _add,
        name=f"{ns}::plain",
        fake_fn=lambda x, y: torch.empty_like(x),
        vmap_fn=_add,
        fake_vmap_fn=lambda x, y: torch.empty_like(x),
        sharding="elementwise" if extras else None,
        autocast="lower_precision" if extras else None,
    )
    triton = register_triton_op(
        _add,
        name=f"{ns}::triton",
        fake_fn=lambda x, y: torch.empty_like(x),
        triton_fn=_LAUNCHER,
        triton_device_types="cpu",
        sharding="elementwise" if extras else None,
    )
    visible = register_triton_op(
        _add,
        name=f"{ns}::visible",
        fake_fn=lambda x, y: torch.empty_like(x),
        vmap_fn=_add,
        fake_vmap_fn=lambda x, y: torch.empty_like(x),
        triton_fn=_LAUNCHER,
        triton_vmap_fn=_LAUNCHER,
        triton_device_types="cpu",
        compiler_visible=extras,
    )
    return [plain, triton, visible]


def _call_all(ops: list[opreg_core.VmapOp[Any, Any]]) -> None:
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    for op in ops:
        torch.testing.assert_close(op(x, y), x + y)
        torch.testing.assert_close(torch.vmap(op)(x, y), x + y)
        torch.testing.assert_close(torch.vmap(torch.vmap(op))(x, y), x + y)


@pytest.fixture
def dtensor() -> None:
    """DTensor imported, so that sharding rules are applied (not only pending)."""
    if not torch.distributed.is_available():
        pytest.skip("needs torch.distributed")
    importlib.import_module("torch.distributed.tensor")


def test_unregister_leaves_no_table_mentioning_the_op(
    opreg_namespace: OpNamespace, dtensor: None
) -> None:
    ns = opreg_namespace.name
    caches = _lru_caches()
    ops = _register_all(ns)
    _call_all(ops)
    overloads = [o for op in ops for o in (op.overload, op.batched_overload) if o is not None]
    # The walk sees the tables (else the test below could pass on a blind walk).
    held = tables_mentioning(ns)
    assert {"opreg_core._registry._ops", "opreg_core._dtensor._applied"} <= set(held), held
    visible = [f"{ns}::visible", f"{ns}::visible{opreg_core._naming.BATCHED_SUFFIX}"]
    assert all(_torch_dispatch_rule(name) for name in visible)
    assert any(o in _dtensor_strategies() for o in overloads)

    for op in ops:
        unregister(op.qualname)

    assert tables_mentioning(ns) == []
    assert _lru_caches() == caches
    assert not any(o in _dtensor_strategies() for o in overloads)
    assert [_torch_dispatch_rule(name) for name in visible] == [None, None]
    assert all(op.extensions == {} for op in ops)


def test_a_re_registration_starts_clean(opreg_namespace: OpNamespace, dtensor: None) -> None:
    """The same names again, without the sharding rule and the compiler-visible mode: nothing
    of the first registration answers for the second (and registering them again with both
    works: no rule is left over in torch to collide with)."""
    ns = opreg_namespace.name
    first = _register_all(ns)
    _call_all(first)
    overloads = [o for op in first for o in (op.overload, op.batched_overload) if o is not None]
    second = _register_all(ns, extras=False)
    _call_all(second)
    assert [op.sharding for op in second] == [None, None, None]
    assert _dtensor._applied.get(f"{ns}::plain") is None
    assert not any(o in _dtensor_strategies() for o in overloads)
    assert _torch_dispatch_rule(f"{ns}::visible") is None
    assert [op.extensions for op in first] == [op.extensions for op in second]  # the live ones
    third = _register_all(ns)
    _call_all(third)
    assert _torch_dispatch_rule(f"{ns}::visible") is not None
    for op in third:
        unregister(op.qualname)
    assert tables_mentioning(ns) == []


def test_a_table_that_unregister_does_not_clear_is_found(
    opreg_namespace: OpNamespace, dtensor: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutants: the DTensor rules no longer dropped on unregister; a new per-op table."""
    ns = opreg_namespace.name
    drop = _dtensor._drop
    monkeypatch.setattr(_dtensor, "_drop", lambda qualname: None)
    ops = _register_all(ns)
    _call_all(ops)
    monkeypatch.setattr(opreg_kernels._register, "_seen", {ops[1].qualname}, raising=False)
    monkeypatch.setattr(opreg_core._batching, "_by_op", {1: [ops[0]]}, raising=False)
    for op in ops:
        unregister(op.qualname)
    try:
        assert tables_mentioning(ns) == [
            "opreg_core._batching._by_op",
            "opreg_core._dtensor._applied",
            "opreg_kernels._register._seen",
        ]
    finally:
        for op in ops:
            drop(op.qualname)
