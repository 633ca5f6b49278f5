"""Backwards that write their gradients into the saved inputs, as Liger-Kernel's SwiGLU
backward does: a SwiGLU-like op ``silu(a) * b`` whose backward calls a mutating op
(``mutates_args``) writing ``da`` into ``a`` and ``db`` into ``b``, and returns them. The
correct op passes every check (once differentiable); the mutants write without declaring it
(as a Triton kernel writing through pointers would) or write a wrong gradient."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor

from opreg_core import SampleInput, register_vmap_op
from opreg_testing import OpNamespace

from .spec import CorrectOp, Mutant, randn


def _samples(device: torch.device) -> Iterator[SampleInput]:
    yield SampleInput((randn(3, 4, seed=11).to(device), randn(3, 4, seed=12).to(device)))
    yield SampleInput((randn(2, 5, seed=13).to(device), randn(2, 5, seed=14).to(device)))


def _gradients(a: Tensor, b: Tensor, g: Tensor) -> tuple[Tensor, Tensor]:
    s = torch.sigmoid(a)
    silu = a * s
    return g * b * (s + silu * (1 - s)), g * silu


def _wrong_gradients(a: Tensor, b: Tensor, g: Tensor) -> tuple[Tensor, Tensor]:
    s = torch.sigmoid(a)
    return g * b * s, g * a * s  # da misses silu's (1 - s) term


def _swiglu(ns: OpNamespace, name: str, writer: Callable[[Tensor, Tensor, Tensor], None],
            declared: bool) -> Any:  # fmt: skip
    """The op, with ``writer(a, b, g)`` (registered as ``<name>_backward_``, declaring its
    writes into ``a`` and ``b`` when ``declared``) as what its backward calls."""
    write = register_vmap_op(
        writer,
        name=ns.qualname(f"{name}_backward_"),
        schema=(
            "(Tensor(a!) a, Tensor(b!) b, Tensor g) -> ()"
            if declared
            else "(Tensor a, Tensor b, Tensor g) -> ()"
        ),
        fake_fn=lambda a, b, g: None,
        mutates_args=("a", "b") if declared else (),
        differentiable=False,
    )

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(*inputs)

    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor]:
        a, b = ctx.saved_tensors
        write(a, b, g)  # the gradients, written into the saved inputs
        return a, b

    def swiglu(a: Tensor, b: Tensor) -> Tensor:
        return torch.nn.functional.silu(a) * b

    return register_vmap_op(
        swiglu,
        name=ns.qualname(name),
        fake_fn=lambda a, b: torch.empty_like(a),
        backward=backward,
        setup_context=setup_context,
        sample_inputs=_samples,
    )


def _declared(a: Tensor, b: Tensor, g: Tensor) -> None:
    da, db = _gradients(a, b, g)
    a.copy_(da)
    b.copy_(db)


def _undeclared(a: Tensor, b: Tensor, g: Tensor) -> None:
    da, db = _gradients(a, b, g)
    a.data.copy_(da)  # through the storage, as a kernel writing through pointers: no version bump
    b.data.copy_(db)


def _wrong(a: Tensor, b: Tensor, g: Tensor) -> None:
    da, db = _wrong_gradients(a, b, g)
    a.copy_(da)
    b.copy_(db)


CORRECT = [
    CorrectOp(
        "inplace_backward_swiglu",
        "a SwiGLU-like op whose backward writes its gradients into the saved inputs through a "
        "mutating op (Liger-Kernel's pattern)",
        lambda ns: _swiglu(ns, "swiglu", _declared, declared=True),
    )
]

MUTANTS = [
    Mutant(
        "inplace_backward_undeclared",
        "autograd",
        "the backward writes its gradients into the saved inputs behind autograd's back (an op "
        "that does not declare the write)",
        lambda ns: _swiglu(ns, "swiglu_undeclared", _undeclared, declared=False),
    ),
    Mutant(
        "inplace_backward_wrong_gradient",
        "autograd",
        "the in-place backward writes a wrong gradient for a (silu's (1 - s) term missing)",
        lambda ns: _swiglu(ns, "swiglu_wrong", _wrong, declared=True),
    ),
]
