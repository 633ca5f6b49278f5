"""Finding the opreg ops a module registered, for the CLI and for parametrized tests."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

from opreg_core import VmapOp, registered_ops

if TYPE_CHECKING:
    import pytest


def _module_name(module: str | ModuleType) -> str:
    if isinstance(module, ModuleType):
        return module.__name__
    if not isinstance(module, str) or not module:
        raise TypeError(f"module must be a module or a dotted module name, got {module!r}")
    importlib.import_module(module)
    return module


def ops_in(module: str | ModuleType) -> tuple[VmapOp[Any, Any], ...]:
    """Import ``module`` and return the opreg ops defined in it or its submodules.

    An op belongs to the module of the function it was registered from (``op.module``).
    Raises ``ModuleNotFoundError`` for a module that cannot be imported.
    """
    return registered_ops(_module_name(module))


def parametrize_ops(*modules: str | ModuleType, argname: str = "op") -> pytest.MarkDecorator:
    """``@pytest.mark.parametrize(argname, ops)`` over the ops of ``modules``, ids = op names.

    A module that registers no op is an error (``ValueError``), so a typo cannot silently
    turn a test into no test.
    """
    import pytest

    if not modules:
        raise TypeError("parametrize_ops needs at least one module")
    ops: list[VmapOp[Any, Any]] = []
    for module in modules:
        found = ops_in(module)
        if not found:
            raise ValueError(f"module {_module_name(module)!r} registered no opreg op")
        ops.extend(op for op in found if op not in ops)
    return pytest.mark.parametrize(argname, ops, ids=[op.qualname for op in ops])
