"""What the checks need to know about an op: opreg ops and plain PyTorch operators alike."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from opreg_core import VmapOp

from ._private import (
    CustomOpDef,
    OpOverload,
    OpOverloadPacket,
    custom_op_overload,
    has_kernel_for_dispatch_key,
    overload_schema,
    packet_qualname,
)

#: What the check functions accept as ``op``.
OpLike = VmapOp[..., Any] | OpOverload[..., Any] | OpOverloadPacket[..., Any] | CustomOpDef


@dataclass(frozen=True)
class Target:
    """An op resolved for checking: its name, its ``OpOverload`` and, for opreg ops, the op."""

    name: str
    overload: OpOverload[..., Any]
    opreg: VmapOp[..., Any] | None

    @property
    def call(self) -> Callable[..., Any]:
        """The callable the checks run (the op itself: the dispatcher entry point)."""
        return self.opreg if self.opreg is not None else self.overload

    @property
    def schema(self) -> torch.FunctionSchema:
        return overload_schema(self.overload)

    @property
    def arg_names(self) -> tuple[str, ...]:
        """Names of the positional parameters, in order."""
        return tuple(a.name for a in self.schema.arguments if not a.kwarg_only)

    @property
    def mutated_args(self) -> tuple[str, ...]:
        """Names of the parameters the op writes to (from the schema)."""
        return tuple(
            a.name
            for a in self.schema.arguments
            if a.alias_info is not None and a.alias_info.is_write
        )

    @property
    def output_batch_dims(self) -> Any:
        """``torch.vmap``'s ``out_dims`` for the op: 0 for a tensor (or list of tensors) output,
        None for a plain value (an ``int``, ``float``... that vmap cannot batch); one entry per
        output, or a single one for one output."""
        dims = tuple(
            0 if str(r.real_type) in ("Tensor", "List[Tensor]") else None
            for r in self.schema.returns
        )
        return dims[0] if len(dims) == 1 else dims

    def has_batching_rule(self) -> bool:
        """Whether a kernel on ``FuncTorchBatched`` exists (otherwise vmap loops per sample)."""
        return has_kernel_for_dispatch_key(overload_name(self.overload), "FuncTorchBatched")


def overload_name(overload: OpOverload[..., Any]) -> str:
    """``"namespace::name"`` or ``"namespace::name.overload"`` (torch leaves ``name()`` untyped)."""
    name: str = overload.name()  # type: ignore[no-untyped-call]
    return name


def resolve(op: object) -> Target:
    """Resolve ``op`` for the checks; ``TypeError`` says what is accepted."""
    if isinstance(op, VmapOp):
        return Target(op.qualname, op.overload, op)
    if isinstance(op, CustomOpDef):
        overload = custom_op_overload(op)
        return Target(overload_name(overload), overload, None)
    if isinstance(op, OpOverload):
        return Target(overload_name(op), op, None)
    if isinstance(op, OpOverloadPacket):
        overloads: list[str] = op.overloads()  # type: ignore[no-untyped-call]
        if len(overloads) != 1:
            raise TypeError(
                f"{packet_qualname(op)} has several overloads ({', '.join(overloads)}); "
                "pass one of them, e.g. torch.ops.ns.name.default"
            )
        return resolve(getattr(op, overloads[0]))
    raise TypeError(
        "expected an opreg op (from register_vmap_op), a torch OpOverload or OpOverloadPacket, "
        f"or a torch.library.custom_op; got {type(op).__name__}: {op!r}"
    )
