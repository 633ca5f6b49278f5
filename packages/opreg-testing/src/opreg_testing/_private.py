"""Every torch internal that opreg-testing relies on, and nothing else.

A torch upgrade that drops or changes one of these breaks here, in one place:
``tests/test_private_boundaries.py`` names each entry of :data:`INTERNALS` that no longer
resolves, and fails on any internal used outside this module. Each entry says why it is
needed and which public API would replace it.
Everything else in opreg-testing uses public torch APIs only (``torch.compiler.reset`` and
``torch.compiler.list_backends``, ``torch.library.opcheck``, ``torch.func``, ...).
"""

from __future__ import annotations

from typing import Any

import torch

# -- The op types the checks accept ----------------------------------------------------------
# Why: ``check_*(op)`` takes a torch operator (``torch.ops.ns.name[.overload]``) or a
# ``torch.library.custom_op`` besides an opreg op, and must tell them apart and reach the
# operator's schema (argument names, which arguments it mutates). torch exposes these types
# only from private modules (``torch.library`` uses but does not export ``CustomOpDef``).
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/testing/test_internals_contract.py``).
# Public replacement: exported op types (e.g. ``torch.library.CustomOpDef`` in ``__all__``),
# an ``OpOverload.schema`` property and a public way from a custom op to its overload.
from torch._library.custom_ops import CustomOpDef
from torch._ops import OpOverload, OpOverloadPacket

# -- Fake tensors ----------------------------------------------------------------------------
# Why: the fake check runs the op under ``FakeTensorMode`` (static shapes, and every input dim
# symbolic as ``torch.compile(dynamic=True)`` traces) to compare its fake implementation with
# the real output. ``torch.library.opcheck`` does a fake-tensor test too, but only with the
# sample's static shapes and without saying which metadata differs.
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/testing/test_internals_contract.py``).
# Public replacement: a public fake-tensor mode (``torch.library`` has none; the symbolic-shape
# helpers below live in ``torch.fx.experimental``, outside any stability promise as well).
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import (
    DimDynamic,
    ShapeEnv,
    StatelessSymbolicContext,
)

# -- Nested structures -----------------------------------------------------------------------
# Why: samples hold tensors inside lists, tuples and dicts; the checks map over them and
# collect them the way torch itself flattens arguments.
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/testing/test_internals_contract.py``).
# Public replacement: ``torch.utils.pytree`` (not importable in torch 2.13).
from torch.utils._pytree import tree_leaves, tree_map_only

__all__ = [
    "INTERNALS",
    "CustomOpDef",
    "FakeTensorMode",
    "OpOverload",
    "OpOverloadPacket",
    "custom_op_overload",
    "fake_mode",
    "has_kernel_for_dispatch_key",
    "overload_schema",
    "packet_qualname",
    "tensor_version",
    "to_fake",
    "tree_leaves",
    "tree_map_only",
]

#: Dotted names of every internal used here (attributes that exist only on instances are
#: listed as the instance attribute of the class: a method of the class assigns them).
INTERNALS: tuple[str, ...] = (
    "torch._library.custom_ops.CustomOpDef",
    "torch._library.custom_ops.CustomOpDef._opoverload",
    "torch._ops.OpOverload",
    "torch._ops.OpOverload._schema",
    "torch._ops.OpOverloadPacket",
    "torch._ops.OpOverloadPacket._qualified_op_name",
    "torch._subclasses.fake_tensor.FakeTensorMode",
    "torch._subclasses.fake_tensor.FakeTensorMode.from_tensor",
    "torch.fx.experimental.symbolic_shapes.DimDynamic.DYNAMIC",
    "torch.fx.experimental.symbolic_shapes.ShapeEnv",
    "torch.fx.experimental.symbolic_shapes.StatelessSymbolicContext",
    "torch.utils._pytree.tree_leaves",
    "torch.utils._pytree.tree_map_only",
    "torch._C._dispatch_has_kernel_for_dispatch_key",
    "torch.Tensor._version",
)


def overload_schema(overload: OpOverload[..., Any]) -> torch.FunctionSchema:
    """The schema of a torch operator overload (argument names, aliasing, mutation)."""
    return overload._schema


def custom_op_overload(op: CustomOpDef) -> OpOverload[..., Any]:
    """The dispatcher operator behind a ``torch.library.custom_op``."""
    overload: OpOverload[..., Any] = op._opoverload
    return overload


def packet_qualname(packet: OpOverloadPacket[..., Any]) -> str:
    """``"namespace::name"`` of an operator packet (``torch.ops.ns.name``)."""
    return packet._qualified_op_name


def fake_mode(dynamic: bool) -> FakeTensorMode:
    """A fresh ``FakeTensorMode``; with ``dynamic``, one whose tensors can have symbolic dims."""
    return FakeTensorMode(shape_env=ShapeEnv() if dynamic else None)


def to_fake(mode: FakeTensorMode, t: torch.Tensor, dynamic: bool) -> torch.Tensor:
    """A fake copy of ``t`` in ``mode``; with ``dynamic`` every dim of it is symbolic."""
    if not dynamic:
        return mode.from_tensor(t)
    dims = [DimDynamic.DYNAMIC] * t.dim()
    return mode.from_tensor(t, symbolic_context=StatelessSymbolicContext(dynamic_sizes=dims))


# -- Dispatcher queries ----------------------------------------------------------------------
# Why: the vmap check reports which batching path ran for a torch operator: its own batching
# rule (a kernel on ``FuncTorchBatched``) or PyTorch's per-sample fallback loop.
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/testing/test_internals_contract.py``).
# Public replacement: a ``torch.library`` query for an operator's kernels per dispatch key.


def has_kernel_for_dispatch_key(qualname: str, dispatch_key: str) -> bool:
    """Whether the operator ``"ns::name[.overload]"`` has a kernel on ``dispatch_key``."""
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(qualname, dispatch_key))


# -- Version counters ----------------------------------------------------------------------------
# Why: the autograd check tells a backward that writes into its saved inputs through an op that
# declares the write (``mutates_args``: the dispatcher bumps the tensor's version counter, so
# autograd and torch.compile know) from one that writes behind autograd's back (a raw kernel
# writing through pointers: no bump).
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/testing/test_internals_contract.py``).
# Public replacement: a public version-counter query on tensors.


def tensor_version(tensor: torch.Tensor) -> int:
    """The version counter of ``tensor`` (bumped by every in-place write autograd sees)."""
    return int(tensor._version)
