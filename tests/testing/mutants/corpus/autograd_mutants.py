"""Mutants the autograd check must catch: backwards with the wrong sign, scale, argument order
or shape, second derivatives that are detached, silently zero or wrong, double backwards that
fail with an error other than a clear refusal, and backwards that work for one sample but not
under ``torch.func`` transforms. (A backward calling an op registered without a backward is
once differentiable, a correct op: see correct_ops.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor

from opreg_core import SampleInput, register_vmap_op
from opreg_testing import OpNamespace

from .spec import Mutant, pairs, randn, save_inputs, unary


def _sin(name: str, wrong: str, backward: Any) -> Mutant:
    """``sin(x)`` with the given backward (ctx.saved_tensors = (x, out))."""

    def build(ns: OpNamespace) -> Any:
        return unary(
            ns,
            name,
            torch.sin,
            vmap_fn=torch.sin,
            backward=backward,
            setup_context=save_inputs,
        )

    return Mutant(name, "autograd", wrong, build)


def _x(ctx: Any) -> Tensor:
    x: Tensor = ctx.saved_tensors[0]
    return x


def _no_grad_backward(ctx: Any, g: Tensor) -> Tensor:
    with torch.no_grad():
        return g * torch.cos(_x(ctx))


def _numpy_backward(ctx: Any, g: Tensor) -> Tensor:
    x = _x(ctx).detach()
    return g * torch.from_numpy(np.cos(x.numpy()))


def _pair(name: str, wrong: str, fn: Any, backward: Any) -> Mutant:
    def build(ns: OpNamespace) -> Any:
        return register_vmap_op(
            fn,
            name=ns.qualname(name),
            schema="(Tensor x, Tensor y) -> Tensor",
            fake_fn=lambda x, y: torch.empty_like(x),
            vmap_fn=fn,
            fake_vmap_fn=lambda x, y: torch.empty_like(x),
            backward=backward,
            setup_context=save_inputs,
            sample_inputs=pairs,
        )

    return Mutant(name, "autograd", wrong, build)


def _swapped(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor]:
    x, y, _ = ctx.saved_tensors
    return g * 2 * x * y, g * y * y  # (d/dy, d/dx) instead of (d/dx, d/dy)


def _wrong_second(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor]:
    _, y, _ = ctx.saved_tensors
    return g * y, g


def _scalar_samples(device: torch.device) -> Iterator[SampleInput]:
    yield SampleInput((randn(3, 4, seed=21).to(device), randn(seed=22).to(device)), name="3x4, c")


def _item_backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor]:
    x, c, _ = ctx.saved_tensors
    return g * c.item(), (g * x).sum()  # .item(): no per-sample value under vmap/grad


def _float_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, c = inputs
    ctx.c = float(c)  # a Python number from a tensor: fails on vmap's batched tensors
    ctx.save_for_backward(x)


def _float_backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor]:
    (x,) = ctx.saved_tensors
    return g * ctx.c, (g * x).sum()


def _with_scalar(name: str, wrong: str, setup: Any, backward: Any) -> Mutant:
    def build(ns: OpNamespace) -> Any:
        return register_vmap_op(
            lambda x, c: x * c,
            name=ns.qualname(name),
            schema="(Tensor x, Tensor c) -> Tensor",
            fake_fn=lambda x, c: torch.empty_like(x),
            backward=backward,
            setup_context=setup,
            sample_inputs=_scalar_samples,
        )

    return Mutant(name, "autograd", wrong, build)


def _broadcast_samples(device: torch.device) -> Iterator[SampleInput]:
    yield SampleInput((randn(4, seed=23).to(device), randn(3, 4, seed=24).to(device)), name="a4")


def _scalar_grad_for_a(ns: OpNamespace) -> Any:
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor]:
        a, x, _ = ctx.saved_tensors
        return (g * x).sum(), g * a  # a's gradient reduced over every dim: shape () not (4,)

    return register_vmap_op(
        lambda a, x: a * x,
        name=ns.qualname("broadcast_grad_over_all_dims"),
        schema="(Tensor a, Tensor x) -> Tensor",
        fake_fn=lambda a, x: torch.empty_like(x),
        backward=backward,
        setup_context=save_inputs,
        sample_inputs=_broadcast_samples,
    )


def _list_samples(device: torch.device) -> Iterator[SampleInput]:
    yield SampleInput(([randn(3, 4, seed=25).to(device), randn(3, 4, seed=26).to(device)],))


def _swapped_list(ns: OpNamespace) -> Any:
    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(*inputs[0])

    def backward(ctx: Any, g: Tensor) -> tuple[list[Tensor]]:
        a, b = ctx.saved_tensors
        return ([g * a, g * b],)  # should be [g * b, g * a]

    return register_vmap_op(
        lambda xs: xs[0] * xs[1],
        name=ns.qualname("list_grads_swapped"),
        schema="(Tensor[] xs) -> Tensor",
        fake_fn=lambda xs: torch.empty_like(xs[0]),
        backward=backward,
        setup_context=setup,
        sample_inputs=_list_samples,
    )


def _kwarg_samples(device: torch.device) -> Iterator[SampleInput]:
    yield SampleInput((randn(3, 4, seed=27).to(device),), {"alpha": -1.5}, name="alpha=-1.5")


def _ignores_alpha(ns: OpNamespace) -> Any:
    return register_vmap_op(
        lambda x, *, alpha=1.0: x * alpha,
        name=ns.qualname("backward_ignores_kwarg"),
        schema="(Tensor x, *, float alpha=1.0) -> Tensor",
        fake_fn=lambda x, *, alpha=1.0: torch.empty_like(x),
        backward=lambda ctx, g: g,  # forgets alpha
        sample_inputs=_kwarg_samples,
    )


def _wrong_inner_derivative(ns: OpNamespace) -> Any:
    # cos with a wrong backward (+sin): sin's backward calls it, so sin's first derivative is
    # right and its second derivative wrong.
    cos_wrong = unary(
        ns,
        "cos_with_wrong_backward",
        torch.cos,
        backward=lambda ctx, g: g * torch.sin(ctx.saved_tensors[0]),
        setup_context=save_inputs,
    )
    return unary(
        ns,
        "second_derivative_wrong",
        torch.sin,
        backward=lambda ctx, g: g * cos_wrong(ctx.saved_tensors[0]),
        setup_context=save_inputs,
    )


MUTANTS = [
    _sin("backward_sign", "the backward has the wrong sign", lambda c, g: -g * torch.cos(_x(c))),
    _sin(
        "backward_scale", "the backward is twice too large", lambda c, g: 2 * g * torch.cos(_x(c))
    ),
    _sin(
        "backward_uses_output",
        "the backward uses the saved output where the input is needed (cos(sin(x)))",
        lambda c, g: g * torch.cos(c.saved_tensors[1]),
    ),
    _sin(
        "backward_detached",
        "the backward runs under no_grad: its result is not differentiable (gradgrad)",
        _no_grad_backward,
    ),
    _sin(
        "backward_partly_detached",
        "the backward detaches the saved input: the second derivative misses a term",
        lambda c, g: g * torch.cos(_x(c).detach()),
    ),
    _sin(
        "backward_through_numpy",
        "the backward computes through NumPy: no second derivative, fails under torch.func",
        _numpy_backward,
    ),
    _pair(
        "backward_arguments_swapped",
        "the backward returns the gradients of x and y in the wrong order",
        lambda x, y: x * y * y,
        _swapped,
    ),
    _pair(
        "backward_second_input_wrong",
        "the gradient of the second input is g instead of g * x",
        lambda x, y: x * y,
        _wrong_second,
    ),
    _pair(
        "backward_product_rule_missing",
        "the backward of x * sin(y) forgets the product rule for x",
        lambda x, y: x * torch.sin(x) * y,
        lambda c, g: (
            g * torch.sin(c.saved_tensors[0]) * c.saved_tensors[1],
            g * c.saved_tensors[0] * torch.sin(c.saved_tensors[0]),
        ),
    ),
    _with_scalar(
        "backward_calls_item",
        "the backward calls .item() on an input: right for one sample, fails under vmap/grad",
        save_inputs,
        _item_backward,
    ),
    _with_scalar(
        "setup_context_calls_float",
        "setup_context turns a tensor into a Python float: fails under vmap",
        _float_setup,
        _float_backward,
    ),
    Mutant(
        "broadcast_grad_over_all_dims",
        "autograd",
        "the gradient of a broadcast input is summed over every dim (shape () for (4,))",
        _scalar_grad_for_a,
    ),
    Mutant(
        "list_grads_swapped",
        "autograd",
        "the gradients of a list argument come back in the wrong order",
        _swapped_list,
    ),
    Mutant(
        "backward_ignores_kwarg",
        "autograd",
        "the backward ignores the keyword argument alpha",
        _ignores_alpha,
    ),
    Mutant(
        "second_derivative_wrong",
        "autograd",
        "the backward calls an op whose own backward is wrong: the second derivative is wrong",
        _wrong_inner_derivative,
    ),
]


# -- forward mode (ops with a jvp) ----------------------------------------------------------------


def _cos_backward(ctx: Any, g: Tensor) -> Tensor:
    return g * torch.cos(_x(ctx))


def _sin_jvp(name: str, wrong: str, jvp: Any) -> Mutant:
    """``sin(x)`` with a right backward and the given jvp (ctx.saved_tensors = (x, out))."""

    def build(ns: OpNamespace) -> Any:
        return unary(
            ns,
            name,
            torch.sin,
            vmap_fn=torch.sin,
            backward=_cos_backward,
            setup_context=save_inputs,
            jvp=jvp,
        )

    return Mutant(name, "autograd", wrong, build)


def _xyy_backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor]:
    x, y, _ = ctx.saved_tensors
    return g * y * y, g * 2 * x * y


def _pair_jvp(name: str, wrong: str, jvp: Any) -> Mutant:
    """``x * y * y`` with a right backward and the given jvp."""

    def build(ns: OpNamespace) -> Any:
        return register_vmap_op(
            lambda x, y: x * y * y,
            name=ns.qualname(name),
            schema="(Tensor x, Tensor y) -> Tensor",
            fake_fn=lambda x, y: torch.empty_like(x),
            vmap_fn=lambda x, y: x * y * y,
            fake_vmap_fn=lambda x, y: torch.empty_like(x),
            backward=_xyy_backward,
            setup_context=save_inputs,
            jvp=jvp,
            sample_inputs=pairs,
        )

    return Mutant(name, "autograd", wrong, build)


def _jvp_swapped(ctx: Any, x_t: Tensor | None, y_t: Tensor | None) -> Tensor:
    x, y, _ = ctx.saved_tensors
    out = torch.zeros_like(x)
    if y_t is not None:
        out = out + y_t * y * y  # the tangent of y where x's belongs
    if x_t is not None:
        out = out + 2 * x * y * x_t
    return out


def _jvp_drops_y(ctx: Any, x_t: Tensor | None, y_t: Tensor | None) -> Tensor:
    x, y, _ = ctx.saved_tensors
    return torch.zeros_like(x) if x_t is None else x_t * y * y  # forgets y's tangent


def _half_precision_jvp(ctx: Any, x_t: Tensor) -> Tensor:
    # cos in float16: within finite differences' tolerance (gradcheck passes), but not the
    # transpose of the float64 backward
    return x_t * torch.cos(_x(ctx)).half().to(x_t.dtype)


def _item_jvp(ctx: Any, x_t: Tensor | None, c_t: Tensor | None) -> Tensor:
    x, c, _ = ctx.saved_tensors
    out = torch.zeros_like(x)
    if x_t is not None:
        out = out + x_t * c.item()  # .item(): no per-sample value under vmap
    if c_t is not None:
        out = out + x * c_t
    return out


def _xc_backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor]:
    x, c, _ = ctx.saved_tensors
    return g * c, (g * x).sum()


def _jvp_item(ns: OpNamespace) -> Any:
    return register_vmap_op(
        lambda x, c: x * c,
        name=ns.qualname("jvp_calls_item"),
        schema="(Tensor x, Tensor c) -> Tensor",
        fake_fn=lambda x, c: torch.empty_like(x),
        backward=_xc_backward,
        setup_context=save_inputs,
        jvp=_item_jvp,
        sample_inputs=_scalar_samples,
    )


MUTANTS += [
    _sin_jvp("jvp_sign", "the jvp has the wrong sign", lambda c, t: -t * torch.cos(_x(c))),
    _sin_jvp("jvp_scale", "the jvp is twice too large", lambda c, t: 2 * t * torch.cos(_x(c))),
    _sin_jvp(
        "jvp_inconsistent_with_backward",
        "the jvp computes in float16: finite differences cannot see it, the backward can",
        _half_precision_jvp,
    ),
    _pair_jvp(
        "jvp_arguments_swapped",
        "the jvp uses the tangent of y where x's belongs and the other way round",
        _jvp_swapped,
    ),
    _pair_jvp("jvp_drops_a_tangent", "the jvp forgets the tangent of y", _jvp_drops_y),
    Mutant(
        "jvp_calls_item",
        "autograd",
        "the jvp calls .item() on an input: right for one sample, fails under vmap",
        _jvp_item,
    ),
]


# -- second derivatives: silently wrong, or failing with an error that is not a clear refusal ----


def _inner_backward_zeros(ns: OpNamespace) -> Any:
    # cos whose backward returns zeros: sin's backward calls it, so sin's second derivative is
    # silently zero (no error: this is not "once differentiable").
    cos_zero = unary(
        ns, "cos_with_zero_backward", torch.cos, backward=lambda ctx, g: torch.zeros_like(g)
    )
    return unary(
        ns,
        "inner_backward_returns_zeros",
        torch.sin,
        backward=lambda ctx, g: g * cos_zero(ctx.saved_tensors[0]),
        setup_context=save_inputs,
    )


def _inner_op_under_no_grad(ns: OpNamespace) -> Any:
    # The backward calls an op registered without a backward, but under no_grad: the op records
    # nothing, so double backward never reaches its clear error and would be silently zero.
    cos_plain = unary(ns, "cos_without_backward_no_grad", torch.cos)

    def backward(ctx: Any, g: Tensor) -> Tensor:
        with torch.no_grad():
            c = cos_plain(ctx.saved_tensors[0])
        return g * c

    return unary(
        ns,
        "inner_op_without_backward_under_no_grad",
        torch.sin,
        backward=backward,
        setup_context=save_inputs,
    )


def _inner_backward_shape_error(ns: OpNamespace) -> Any:
    # cos whose backward fails with a shape error: double backward raises, but not a clear
    # refusal of second derivatives: a bug, which must fail.
    cos_broken = unary(
        ns,
        "cos_with_broken_backward",
        torch.cos,
        backward=lambda ctx, g: g @ torch.ones(g.shape[-1] + 1, 1, dtype=g.dtype),
    )
    return unary(
        ns,
        "inner_backward_shape_error",
        torch.sin,
        backward=lambda ctx, g: g * cos_broken(ctx.saved_tensors[0]),
        setup_context=save_inputs,
    )


MUTANTS += [
    Mutant(
        "inner_backward_returns_zeros",
        "autograd",
        "the backward calls an op whose own backward returns zeros: second derivative silently 0",
        _inner_backward_zeros,
    ),
    Mutant(
        "inner_op_without_backward_under_no_grad",
        "autograd",
        "the backward calls an op without a backward under no_grad: double backward gets no "
        "graph and would be silently zero instead of raising",
        _inner_op_under_no_grad,
    ),
    Mutant(
        "inner_backward_shape_error",
        "autograd",
        "double backward fails with a shape error in the inner op's backward (not a clear "
        "refusal of second derivatives)",
        _inner_backward_shape_error,
    ),
    _sin_jvp("jvp_returns_zeros", "the jvp returns zeros", lambda c, t: torch.zeros_like(t)),
]
