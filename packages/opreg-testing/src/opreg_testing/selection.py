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
    turn a test into no test. An op without ``sample_inputs`` gets the ``opreg_unchecked``
    marker: with the plugin its test fails saying how to add them (or skips, with the ini
    key ``opreg_unchecked = skip``), since nothing can check it.
    """
    import pytest

    from .errors import unchecked_message

    if not modules:
        raise TypeError("parametrize_ops needs at least one module")
    ops: list[VmapOp[Any, Any]] = []
    for module in modules:
        found = ops_in(module)
        if not found:
            raise ValueError(f"module {_module_name(module)!r} registered no opreg op")
        ops.extend(op for op in found if op not in ops)
    params = [
        pytest.param(
            op,
            id=op.qualname,
            marks=()
            if op.sample_inputs is not None
            else pytest.mark.opreg_unchecked(unchecked_message(op.qualname, has_samples=False)),
        )
        for op in ops
    ]
    return pytest.mark.parametrize(argname, params)
