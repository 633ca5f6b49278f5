"""Backwards that write their gradients into the saved inputs (the autograd check's helper).

Hand-written Triton libraries save memory this way (Liger-Kernel's SwiGLU and GeGLU backwards
overwrite the saved activations with the gradients, and return them). With opreg the pattern
is a backward that calls a mutating op (``mutates_args``) and returns the mutated buffers: the
dispatcher bumps the buffers' version counters, so autograd refuses a second backward through
the same graph and ``torch.compile`` knows about the write. Such a backward runs once per
forward, so ``gradcheck`` (which backpropagates one graph several times, and perturbs inputs
that the backward has overwritten) cannot check it, and its second derivatives do not exist.

:func:`consumed_inputs` finds such a backward (one forward and backward on fresh inputs:
which inputs the backward changed, and whether the write was declared); the check then
compares the backward with finite differences through :func:`check_vjp_on_fresh_inputs`,
one fresh forward per backward. A write that is not declared (values changed, version counter
not bumped: a raw kernel writing through pointers) fails: autograd and ``torch.compile``
would not know about it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .._private import tensor_version
from ..compare import Mismatch, Tolerance
from ._outputs import floating_outputs, random_like, weighted_sum

#: What the autograd check reports when it declines second derivatives of such a backward.
CONSUMING_BACKWARD = (
    "the backward writes its gradients into its saved inputs (a declared in-place write), so "
    "it runs once per forward and has no derivative of its own"
)


@dataclass(frozen=True)
class Consumed:
    """The inputs a backward wrote into: all of them by name, and those written without
    autograd seeing it (undeclared)."""

    names: tuple[str, ...]
    undeclared: tuple[str, ...]


def consumed_inputs(
    fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], names: Sequence[str]
) -> Consumed | None:
    """Run ``fn`` (the op as a function of its differentiated tensors) forward and backward
    once on ``inputs`` (fresh leaves, used up here); the inputs its backward wrote into, or
    None when it wrote into none (or nothing requires grad)."""
    outs = [o for o in floating_outputs(fn(*inputs)) if o.requires_grad]
    if not outs:
        return None
    before = [t.detach().clone() for t in inputs]
    versions = [tensor_version(t) for t in inputs]
    gen = torch.Generator().manual_seed(2468)
    weights = [random_like(o, gen) for o in outs]
    torch.autograd.grad(weighted_sum(outs, weights), inputs, allow_unused=True)
    written = [
        i
        for i, (t, b) in enumerate(zip(inputs, before, strict=True))
        if not torch.equal(t.detach(), b)
    ]
    if not written:
        return None
    return Consumed(
        names=tuple(names[i] for i in written),
        undeclared=tuple(names[i] for i in written if tensor_version(inputs[i]) == versions[i]),
    )


def check_vjp_on_fresh_inputs(
    fn: Callable[..., Any],
    inputs: tuple[torch.Tensor, ...],
    directions: int = 3,
    eps: float = 1e-6,
    rtol: float = 1e-3,
    atol: float = 1e-5,
) -> Mismatch | None:
    """The backward against central differences of the forward, ``<u, J v>``, for random
    output weights ``u`` and input directions ``v`` (gradcheck's fast mode), each evaluation
    on fresh copies of ``inputs``: a backward that writes into its saved inputs is taken once
    per forward. The first direction that disagrees (gradcheck's tolerances), or None."""
    base = [t.detach() for t in inputs]
    gen = torch.Generator().manual_seed(1357)
    for k in range(directions):
        v = [random_like(b, gen) for b in base]
        with torch.no_grad():
            reference = floating_outputs(fn(*[b.clone() for b in base]))
        u = [random_like(o, gen) for o in reference]
        xs = tuple(b.clone().requires_grad_(True) for b in base)
        grads = torch.autograd.grad(
            weighted_sum(floating_outputs(fn(*xs)), u), xs, allow_unused=True
        )
        backward = sum(
            float((g.detach() * d).real.sum())
            for g, d in zip(grads, v, strict=True)
            if g is not None
        )

        def along(sign: float, v: list[torch.Tensor] = v, u: list[torch.Tensor] = u) -> float:
            with torch.no_grad():
                moved = [(b + sign * eps * d).clone() for b, d in zip(base, v, strict=True)]
                return float(weighted_sum(floating_outputs(fn(*moved)), u))

        numerical = (along(1.0) - along(-1.0)) / (2 * eps)
        if abs(backward - numerical) > atol + rtol * abs(numerical):
            return Mismatch(
                where=f"<output weights u, Jacobian · random direction v> (direction {k})",
                kind="value",
                expected=numerical,
                actual=backward,
                tolerance=Tolerance(rtol, atol),
                count=1,
                total=1,
            )
    return None
