"""Sharding rules: how an opreg op runs on ``torch.distributed.tensor.DTensor`` arguments.

A rule builds, per operator, the function that PyTorch's own mechanism
``torch.distributed.tensor.experimental.register_sharding`` takes (``_dtensor.py`` registers
it). DTensor then picks, per call, the declared input placements that are cheapest to reach,
redistributes the arguments to them, runs the op on each rank's local shards and wraps the
results with the declared output placements. Nothing here imports ``torch.distributed.tensor``
(about 0.6 s) until a rule runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import torch

from ._private import OpOverload, overload_schema, tree_leaves

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
    "sharding_rule",
]

#: PyTorch's contract (``register_sharding``): called with the op's arguments, each tensor
#: replaced by a ``DTensorSpec`` (``.shape``, ``.ndim``, ``.placements``); returns the
#: acceptable ``(output_placements, input_placements)`` pairs for ONE mesh dimension, one
#: placement (or None for a non-tensor) per output and per argument.
ShardingFn: TypeAlias = Callable[
    ..., Sequence[tuple[Sequence["Placement | None"], Sequence["Placement | None"]]]
]


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
    for ret in overload_schema(op).returns:
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
    names = [a.name for a in overload_schema(op).arguments]
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
        returns = [isinstance(r.type, torch.TensorType) for r in overload_schema(op).returns]

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
    :class:`ShardingRule`, or a :data:`ShardingFn` (wrapped in :class:`CustomSharding`).

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
