"""Registering sharding rules with DTensor, for each (re-)registration of an op.

A rule is registered with ``torch.distributed.tensor.experimental.register_sharding`` against
the op's real ``OpOverload`` (and its batched operator's). torch.distributed is optional:
nothing here imports ``torch.distributed.tensor`` (about 0.6 s) until it is needed. A rule
registered before DTensor is imported is kept pending and applied right after
``torch.distributed.tensor`` finishes importing (an import hook), so a library can declare
rules at import time for free; without torch.distributed, rules are only recorded.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import torch

from . import _registry
from ._op import VmapOp
from ._private import OpOverload, clear_sharding_caches, forget_sharding_strategies
from ._sharding import ShardingFn, ShardingRule, ShardingSpec, sharding_rule

_DTENSOR = "torch.distributed.tensor"
_lock = threading.RLock()
#: qualname -> (the overloads a rule was built for, the rule), waiting for DTensor's import.
_pending: dict[str, tuple[list[tuple[OpOverload[..., Any], bool]], ShardingRule]] = {}
#: qualname -> the overloads that currently carry an opreg rule inside DTensor.
_applied: dict[str, list[OpOverload[..., Any]]] = {}


def register_sharding_rule(op: VmapOp[Any, Any], rule: ShardingSpec | None) -> ShardingRule | None:
    """Declare how ``op`` (and its batched operator) runs on DTensor arguments.

    Call it after every registration of the op, with ``rule=None`` when the op declares none:
    a re-registered op name must not inherit the earlier op's rule, nor DTensor's cached
    decisions for it. Calling it again replaces the op's rule. If ``torch.distributed.tensor``
    is not imported yet, the rule is applied right after it is (without torch.distributed it is
    only recorded). Returns the resolved rule (None for ``rule=None``).
    """
    if not isinstance(op, VmapOp):
        raise TypeError(
            f"opreg: register_sharding_rule expects an opreg op, got {type(op).__name__}"
        )
    if rule is None:
        _drop(op.qualname)
        op._state.sharding = None
        return None
    resolved = sharding_rule(rule, op.qualname)
    targets = [(op.overload, False)]
    if op.batched_overload is not None:
        targets.append((op.batched_overload, True))
    fns = [(ov, resolved.sharding_fn(ov, batched)) for ov, batched in targets]  # checks early
    with _lock:
        if _DTENSOR in sys.modules:
            _apply(op.qualname, fns)
        elif torch.distributed.is_available():
            _pending[op.qualname] = (targets, resolved)
            _install_import_hook()
    op._state.sharding = resolved
    return resolved


def _drop(qualname: str) -> None:
    """Forget any rule of ``qualname``: pending, or applied inside DTensor (and its caches)."""
    with _lock:
        _pending.pop(qualname, None)
        if qualname in _applied and _DTENSOR in sys.modules:
            from torch.distributed.tensor import DTensor

            _forget(qualname, DTensor)
            clear_sharding_caches()


def _apply(qualname: str, fns: list[tuple[OpOverload[..., Any], ShardingFn]]) -> None:
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.experimental import register_sharding

    _forget(qualname, DTensor)
    for overload, fn in fns:
        register_sharding(overload)(fn)
    _applied[qualname] = [ov for ov, _ in fns]
    _pending.pop(qualname, None)
    clear_sharding_caches()


def _forget(qualname: str, dtensor: Any) -> None:
    """Drop the strategies of an earlier registration of ``qualname`` (a destroyed operator)."""
    forget_sharding_strategies(dtensor, _applied.pop(qualname, []))


def _flush() -> None:
    """Apply the pending rules of ops that are still live (not replaced by a re-registration)."""
    with _lock:
        for qualname, (targets, rule) in list(_pending.items()):
            live = _registry.lookup(qualname)
            if live is None or live.overload is not targets[0][0]:
                _pending.pop(qualname)
                continue
            _apply(qualname, [(ov, rule.sharding_fn(ov, b)) for ov, b in targets])


class _AfterDTensorImport(importlib.abc.MetaPathFinder):
    """Runs :func:`_flush` right after ``torch.distributed.tensor`` has been imported."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _DTENSOR:
            return None
        _remove_import_hook()
        for finder in sys.meta_path:
            spec = (
                finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            )
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_flush(module: ModuleType) -> None:
            exec_module(module)
            _flush()

        loader.exec_module = exec_then_flush  # type: ignore[method-assign]
        return spec


_hook = _AfterDTensorImport()


def _install_import_hook() -> None:
    if _hook not in sys.meta_path:
        sys.meta_path.insert(0, _hook)


def _remove_import_hook() -> None:
    if _hook in sys.meta_path:
        sys.meta_path.remove(_hook)
