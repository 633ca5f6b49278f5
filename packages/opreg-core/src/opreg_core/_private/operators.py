"""Operators: an opreg op *is* an ``OpOverload``; its entry point, handle and schema."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch

# Why: an opreg op *is* an ``OpOverload`` (so opcheck, torch.compile and torch.export treat it as
# the operator), whose ``__call__`` is the overload's C++ entry point ``_op`` (no Python frame
# per call), and whose kernels redispatch through ``_handle``; the sharding rules read the
# operator's ``_schema``; the name check compares with ``OpOverloadPacket`` attributes.
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: exported ``OpOverload``/``OpOverloadPacket`` types, a ``schema`` property,
# and a supported way to subclass an overload (or a call hook on ``torch.library.custom_op``
# that costs no Python frame).
from torch._ops import OpOverload as OpOverload
from torch._ops import OpOverloadPacket as OpOverloadPacket

#: Dotted names of the internals used here (attributes that exist only on instances are
#: listed as the instance attribute of the class: a method of the class assigns them).
INTERNALS: tuple[str, ...] = (
    "torch._ops.OpOverload",
    "torch._ops.OpOverload._op",
    "torch._ops.OpOverload._handle",
    "torch._ops.OpOverload._schema",
    "torch._ops.OpOverloadPacket",
)


_OP = TypeVar("_OP", bound=OpOverload[Any, Any])


def entry_point(overload: OpOverload[Any, Any]) -> Callable[..., Any]:
    """The C++ entry point of an overload: calling it is a direct call into the dispatcher."""
    call: Callable[..., Any] = overload._op
    return call


def redispatch_boxed(overload: OpOverload[Any, Any]) -> Callable[..., Any]:
    """``redispatch(keyset, *args, **kwargs)`` of an overload, for a kernel ``with_keyset``."""
    return cast(Callable[..., Any], overload._handle.redispatch_boxed)


def overload_schema(overload: OpOverload[Any, Any]) -> torch.FunctionSchema:
    """The schema of an overload (argument names, return types)."""
    return overload._schema


def new_op_object(cls: type[_OP], overload: OpOverload[Any, Any]) -> _OP:
    """An instance of ``cls`` (an ``OpOverload`` subclass whose ``__call__`` is the overload's
    entry point) that is the operator ``overload``: ``OpOverload.__init__`` would register a
    new overload, so the instance is made without it and takes the overload's state (its
    ``__dict__``: the schema, handle, names and caches torch reads from an overload)."""
    op = object.__new__(cls)
    op.__dict__.update(overload.__dict__)
    return op
