"""DTensor sharding: the strategies and cached decisions kept for destroyed operators."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import torch

from .operators import OpOverload

# Why: a re-registered op name gets new operators; DTensor's sharding propagator keeps the
# strategies and cached decisions of the destroyed ones, which must not answer for the new.
# Its caches: the propagator's Python LRU cache (``propagate_op_sharding``) and the C++ fast
# path's cache (``torch._C._clear_DTensor_sharding_propagator_cache``), both cleared by the
# debugging helper ``debug._clear_sharding_prop_cache``; a torch without that helper (2.9)
# has them cleared one by one. Checked on torch 2.11, 2.13, 2.14, 2.15
# (``tests/core/test_internals_contract.py``: a cached decision is gone after the clear, through
# the helper and through the fallback).
# Public replacement: an unregister counterpart of
# ``torch.distributed.tensor.experimental.register_sharding`` that clears its caches.

#: Dotted names of the internals used here.
INTERNALS: tuple[str, ...] = (
    "torch.distributed.tensor.DTensor._op_dispatcher",
    "torch.distributed.tensor.debug._clear_sharding_prop_cache",
    "torch.distributed.tensor._sharding_prop.ShardingPropagator.propagate_op_sharding",
    "torch._C._clear_DTensor_sharding_propagator_cache",
)


def forget_sharding_strategies(dtensor: Any, overloads: Iterable[OpOverload[Any, Any]]) -> None:
    """Drop the sharding strategies DTensor's propagator holds for ``overloads``."""
    propagator = getattr(getattr(dtensor, "_op_dispatcher", None), "sharding_propagator", None)
    for overload in overloads:
        for table in ("op_strategy_funcs", "op_to_schema_info"):
            getattr(propagator, table, {}).pop(overload, None)


def clear_sharding_caches() -> None:
    """DTensor caches sharding decisions per operator and inputs; a new rule must not meet an
    old decision. Through DTensor's debugging helper where torch has it, else each cache (the
    propagator's Python LRU cache, the C++ fast path's) directly; a torch whose caches are
    neither gets a warning, not a silent stale cache."""
    try:
        from torch.distributed.tensor import DTensor, debug
    except ImportError:  # no torch.distributed: no sharding cache either
        return
    helper = getattr(debug, "_clear_sharding_prop_cache", None)
    if helper is not None:
        helper()
        return
    try:
        propagator: Any = DTensor._op_dispatcher.sharding_propagator
        propagator.propagate_op_sharding.cache_clear()
        fast_path = getattr(torch._C, "_clear_DTensor_sharding_propagator_cache", None)
        if fast_path is not None:
            fast_path()
    except (AttributeError, RuntimeError) as exc:
        warnings.warn(
            f"opreg: DTensor's sharding cache could not be cleared on torch {torch.__version__} "
            f"({type(exc).__name__}: {exc}): a re-registered op may meet the sharding decisions "
            "cached for the op it replaced",
            RuntimeWarning,
            stacklevel=2,
        )
