"""Sharding rules: how an opreg op runs on ``torch.distributed.tensor.DTensor`` arguments.

A rule is registered with PyTorch's own mechanism,
``torch.distributed.tensor.experimental.register_sharding``, against the op's real
``OpOverload`` (and its batched operator's). DTensor then picks, per call, the declared input
placements that are cheapest to reach, redistributes the arguments to them, runs the op on each
rank's local shards and wraps the results with the declared output placements.

torch.distributed is optional: nothing here imports ``torch.distributed.tensor`` (about 0.6 s)
until it is needed. A rule registered before DTensor is imported is kept pending and applied
right after ``torch.distributed.tensor`` finishes importing (an import hook), so a library can
declare rules at import time for free; without torch.distributed, rules are only recorded.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import torch
from torch._ops import OpOverload
from torch.utils._pytree import tree_leaves

from . import _registry
from ._op import VmapOp

if TYPE_CHECKING:
    from torch.distributed.tensor.placement_types import Placement

__all__ = [
    "CustomSharding",
    "ElementwiseSharding",
    "ReplicateSharding",
    "RowwiseSharding",
    "ShardingFn",
    "ShardingRule",
    "ShardingSpec",
    "register_sharding_rule",
    "sharding_rule",
]

#: PyTorch's contract (``register_sharding``): called with the op's arguments, each tensor
#: replaced by a ``DTensorSpec`` (``.shape``, ``.ndim``, ``.placements``); returns the
#: acceptable ``(output_placements, input_placements)`` pairs for ONE mesh dimension, one
#: placement (or None for a non-tensor) per output and per argument.
ShardingFn: TypeAlias = Callable[
    ..., Sequence[tuple[Sequence["Placement | None"], Sequence["Placement | None"]]]
]

_DTENSOR = "torch.distributed.tensor"


class ShardingRule:
    """Base class: builds the ``register_sharding`` function of one operator."""

    name: str = "custom"

    def sharding_fn(self, op: OpOverload[..., Any], batched: bool) -> ShardingFn:
        """The function for ``op``; ``batched`` says it is the batched operator of a ``vmap_fn``
        op, whose tensor arguments carry one extra leading (batch) dim."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _placements() -> ModuleType:
    from torch.distributed.tensor import placement_types  # lazy: see the module docstring

    return placement_types


def _is_spec(x: object) -> bool:
    return type(x).__name__ == "DTensorSpec"


def _tensor_returns(qualname: str, op: OpOverload[..., Any]) -> list[bool]:
    """One flag per return: is it a tensor (True) or another value (False, placement None)."""
    flags = []
    for ret in op._schema.returns:
        if isinstance(ret.type, torch.ListType):
            raise ValueError(
                f"opreg: {qualname}: the built-in sharding rules don't support list outputs; "
                "pass a custom sharding function"
            )
        flags.append(isinstance(ret.type, torch.TensorType))
    return flags


def _leaves(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """The arguments in the order DTensor lists their strategies: args, then kwargs, flattened."""
    return tree_leaves(list(args)) + tree_leaves(list(kwargs.values()))


def _leaf_names(
    op: OpOverload[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[str]:
    """The schema argument name of each leaf of :func:`_leaves`."""
    names = [a.name for a in op._schema.arguments]
    out: list[str] = []
    for i, arg in enumerate(args):
        out += [names[i]] * len(tree_leaves(arg))
    for key, value in kwargs.items():
        out += [key] * len(tree_leaves(value))
    return out


@dataclass(frozen=True, repr=False)
class ElementwiseSharding(ShardingRule):
    """Element-wise ops: any sharding of the inputs passes through to the outputs.

    Inputs broadcast against each other (right-aligned, as in PyTorch); every output has the
    broadcast shape. For each dim ``d`` of that shape, "all inputs sharded on ``d``" (broadcast
    dims stay replicated) gives outputs sharded on ``d``; all-replicated gives replicated.
    ``Partial`` inputs are reduced first (an element-wise op is not linear in general).
    """

    name = "elementwise"

    def sharding_fn(self, op: OpOverload[..., Any], batched: bool) -> ShardingFn:
        returns = _tensor_returns(str(op), op)

        def fn(*args: Any, **kwargs: Any) -> list[tuple[list[Any], list[Any]]]:
            p = _placements()
            leaves = _leaves(args, kwargs)
            shapes = [tuple(x.shape) for x in leaves if _is_spec(x)]
            out_shape = tuple(torch.broadcast_shapes(*shapes))  # type: ignore[no-untyped-call]
            rep = p.Replicate()
            found = [
                (
                    [rep if t else None for t in returns],
                    [rep if _is_spec(x) else None for x in leaves],
                )
            ]
            for d in range(len(out_shape)):
                inputs: list[Any] = []
                for x in leaves:
                    if not _is_spec(x):
                        inputs.append(None)
                        continue
                    own = d - (len(out_shape) - x.ndim)
                    sharded = own >= 0 and x.shape[own] == out_shape[d]
                    inputs.append(p.Shard(own) if sharded else rep)
                found.append(([p.Shard(d) if t else None for t in returns], inputs))
            return found

        return fn


@dataclass(frozen=True, repr=False)
class RowwiseSharding(ShardingRule):
    """Row-independent ops: row ``i`` of every output depends only on row ``i`` of the inputs.

    Tensor inputs and outputs are sharded on their leading dim (any other placement is
    redistributed to it); ``replicated`` names arguments that every row reads whole (they are
    replicated). The batched operator may also be sharded on its batch dim.
    """

    replicated: tuple[str, ...] = ()
    name = "rowwise"

    def sharding_fn(self, op: OpOverload[..., Any], batched: bool) -> ShardingFn:
        returns = _tensor_returns(str(op), op)
        qualname = str(op)
        row_dims = (0, 1) if batched else (0,)

        def fn(*args: Any, **kwargs: Any) -> list[tuple[list[Any], list[Any]]]:
            p = _placements()
            leaves = _leaves(args, kwargs)
            names = _leaf_names(op, args, kwargs)
            found = []
            for dim in row_dims:
                split = [
                    _is_spec(x)
                    and x.ndim > dim
                    and (n not in self.replicated or dim < row_dims[-1])
                    for x, n in zip(leaves, names, strict=True)
                ]
                rows = {x.shape[dim] for x, s in zip(leaves, split, strict=True) if s}
                if len(rows) > 1:
                    raise ValueError(
                        f"opreg: {qualname}: the rowwise sharding rule needs every sharded input "
                        f"to have the same size on dim {dim}, got sizes {sorted(rows)}"
                    )
                inputs = [
                    (p.Shard(dim) if s else p.Replicate()) if _is_spec(x) else None
                    for x, s in zip(leaves, split, strict=True)
                ]
                found.append(([p.Shard(dim) if t else None for t in returns], inputs))
            return found

        return fn


@dataclass(frozen=True, repr=False)
class ReplicateSharding(ShardingRule):
    """Any op: gather every input on each rank, compute the whole result, return it replicated.

    Always correct (for deterministic ops) and always costly; downstream code may
    ``redistribute`` the replicated result back to the placement it wants.
    """

    name = "replicate"

    def sharding_fn(self, op: OpOverload[..., Any], batched: bool) -> ShardingFn:
        returns = [isinstance(r.type, torch.TensorType) for r in op._schema.returns]

        def fn(*args: Any, **kwargs: Any) -> list[tuple[list[Any], list[Any]]]:
            rep = _placements().Replicate()
            leaves = _leaves(args, kwargs)
            return [
                (
                    [rep if t else None for t in returns],
                    [rep if _is_spec(x) else None for x in leaves],
                )
            ]

        return fn


@dataclass(frozen=True, repr=False)
class CustomSharding(ShardingRule):
    """Your own ``register_sharding`` function (see :data:`ShardingFn`).

    ``fn`` serves the op; ``batched_fn`` the batched operator of a ``vmap_fn`` op (its tensor
    arguments have one extra leading dim). Without ``batched_fn`` the batched operator replicates.
    """

    fn: ShardingFn
    batched_fn: ShardingFn | None = None
    name = "custom"

    def sharding_fn(self, op: OpOverload[..., Any], batched: bool) -> ShardingFn:
        if not batched:
            return self.fn
        return (
            self.batched_fn
            if self.batched_fn is not None
            else ReplicateSharding().sharding_fn(op, True)
        )


ShardingSpec: TypeAlias = Literal["elementwise", "rowwise", "replicate"] | ShardingRule | ShardingFn

_NAMED: dict[str, Callable[[], ShardingRule]] = {
    "elementwise": ElementwiseSharding,
    "rowwise": RowwiseSharding,
    "replicate": ReplicateSharding,
}


def sharding_rule(spec: ShardingSpec, qualname: str = "op") -> ShardingRule:
    """The rule that ``spec`` names: ``"elementwise"``, ``"rowwise"``, ``"replicate"``, a
    :class:`ShardingRule`, or a :data:`ShardingFn` (wrapped in :class:`Custom`).

    Cheap and import-free, so options can be validated before an op is registered.
    """
    if isinstance(spec, ShardingRule):
        return spec
    if isinstance(spec, str):
        make = _NAMED.get(spec.strip().lower())
        if make is None:
            raise ValueError(
                f"opreg: {qualname}: unknown sharding {spec!r}; expected one of "
                f"{', '.join(map(repr, _NAMED))}, a ShardingRule or a function"
            )
        return make()
    if callable(spec):
        return CustomSharding(spec)
    raise TypeError(
        f"opreg: {qualname}: sharding must be a string, a ShardingRule or a function, "
        f"got {type(spec).__name__}"
    )


# --- registration -------------------------------------------------------------------------

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
    return resolved


def _drop(qualname: str) -> None:
    """Forget any rule of ``qualname``: pending, or applied inside DTensor (and its caches)."""
    with _lock:
        _pending.pop(qualname, None)
        if qualname in _applied and _DTENSOR in sys.modules:
            from torch.distributed.tensor import DTensor

            _forget(qualname, DTensor)
            _clear_caches()


def _apply(qualname: str, fns: list[tuple[OpOverload[..., Any], ShardingFn]]) -> None:
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.experimental import register_sharding

    _forget(qualname, DTensor)
    for overload, fn in fns:
        register_sharding(overload)(fn)
    _applied[qualname] = [ov for ov, _ in fns]
    _pending.pop(qualname, None)
    _clear_caches()


def _forget(qualname: str, dtensor: Any) -> None:
    """Drop the strategies of an earlier registration of ``qualname`` (a destroyed operator)."""
    propagator = getattr(getattr(dtensor, "_op_dispatcher", None), "sharding_propagator", None)
    for overload in _applied.pop(qualname, []):
        for table in ("op_strategy_funcs", "op_to_schema_info"):
            getattr(propagator, table, {}).pop(overload, None)


def _clear_caches() -> None:
    """DTensor caches sharding decisions per operator and inputs; a new rule must not meet an
    old decision. Best effort: the cache helpers are debugging APIs."""
    try:
        from torch.distributed.tensor import debug

        debug._clear_sharding_prop_cache()  # type: ignore[no-untyped-call]
    except (ImportError, AttributeError, RuntimeError):
        pass


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
