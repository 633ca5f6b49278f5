"""Correct ops: every check must pass them (or skip, saying why), with no false alarm.

Every shipped op of opreg-kernels, and ops on the domains a careless check would break:
positive-only inputs (log, sqrt), integer and index inputs (gather, index_select), bools,
broadcast inputs whose backward returns the output-shaped gradient (valid for autograd),
list inputs, keyword arguments, several outputs, a declared mutation, once-differentiable
backwards (double backward raises a clear error), and per-sample
reductions written correctly (the right versions of the batch-mixing mutants).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from opreg_core import SampleInput, VmapOp, register_vmap_op
from opreg_testing import OpNamespace

from .spec import (
    NEEDS_CORE_REDUCTION,
    CorrectOp,
    contiguous_like,
    generator,
    pairs,
    positive,
    randn,
    rest,
    save_inputs,
    unary,
    vectors,
)


def _shipped(name: str) -> CorrectOp:
    def build(ns: OpNamespace) -> Any:
        import opreg_kernels

        return getattr(opreg_kernels, name)

    return CorrectOp(f"shipped_{name}", f"opreg_kernels.{name}", build, triton="optional")


def _positive_samples(device: torch.device) -> Iterator[SampleInput]:
    yield SampleInput((positive(3, 4, seed=51).to(device),), name="3x4 positive")
    yield SampleInput((positive(5, seed=52).to(device),), name="5 positive")


def _log(ns: OpNamespace) -> Any:
    return unary(
        ns,
        "log",
        torch.log,
        vmap_fn=torch.log,
        backward=lambda ctx, g: g / ctx.saved_tensors[0],
        setup_context=save_inputs,
        samples=_positive_samples,
    )


def _sqrt(ns: OpNamespace) -> Any:
    return unary(
        ns,
        "sqrt",
        torch.sqrt,
        vmap_fn=torch.sqrt,
        backward=lambda ctx, g: g / (2 * ctx.saved_tensors[1]),
        setup_context=save_inputs,
        samples=_positive_samples,
    )


def _index_samples(device: torch.device) -> Iterator[SampleInput]:
    g = generator(53)
    idx = torch.randint(0, 4, (3, 6), generator=g)
    yield SampleInput((randn(3, 4, seed=54).to(device), idx.to(device)), name="3x4, idx 3x6")


def _gather_backward(ctx: Any, g: Tensor) -> tuple[Tensor, None]:
    x, idx, _ = ctx.saved_tensors
    return torch.zeros_like(x).scatter_add(1, idx, g), None


def _gather(ns: OpNamespace) -> Any:
    return register_vmap_op(
        lambda x, idx: x.gather(1, idx),
        name=ns.qualname("gather"),
        schema="(Tensor x, Tensor idx) -> Tensor",
        fake_fn=lambda x, idx: x.new_empty(idx.shape),
        vmap_fn=lambda x, idx: x.gather(2, idx),
        fake_vmap_fn=lambda x, idx: x.new_empty(idx.shape),
        backward=_gather_backward,
        setup_context=save_inputs,
        sample_inputs=_index_samples,
    )


def _select_samples(device: torch.device) -> Iterator[SampleInput]:
    idx = torch.tensor([2, 0, 2, 1])
    yield SampleInput((randn(3, 5, seed=55).to(device), idx.to(device)), name="3x5, idx 4")


def _select_batched(x: Tensor, idx: Tensor) -> Tensor:
    rows = torch.arange(x.shape[0], device=x.device)[:, None]
    return x[rows, idx]


def _index_select(ns: OpNamespace) -> Any:
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, None]:
        x, idx, _ = ctx.saved_tensors
        return torch.zeros_like(x).index_add(0, idx, g), None

    return register_vmap_op(
        lambda x, idx: x.index_select(0, idx),
        name=ns.qualname("index_select"),
        schema="(Tensor x, Tensor idx) -> Tensor",
        fake_fn=lambda x, idx: x.new_empty((idx.shape[0], *x.shape[1:])),
        vmap_fn=_select_batched,
        fake_vmap_fn=lambda x, idx: x.new_empty((*idx.shape, *x.shape[2:])),
        backward=backward,
        setup_context=save_inputs,
        sample_inputs=_select_samples,
    )


def _int_samples(device: torch.device) -> Iterator[SampleInput]:
    g = generator(56)
    yield SampleInput((torch.randint(-50, 50, (3, 4), generator=g).to(device),), name="int64")
    yield SampleInput(
        (torch.randint(-50, 50, (5,), generator=g, dtype=torch.int32).to(device),), name="int32"
    )


def _integer(ns: OpNamespace) -> Any:
    def fn(x: Tensor) -> Tensor:
        return x // 3 + x % 5

    return unary(ns, "integer_arith", fn, vmap_fn=fn, samples=_int_samples)


def _where_samples(device: torch.device) -> Iterator[SampleInput]:
    mask = randn(3, 4, seed=57) > 0
    x, y = randn(3, 4, seed=58), randn(3, 4, seed=59)
    yield SampleInput((mask.to(device), x.to(device), y.to(device)), name="bool mask 3x4")


def _where(ns: OpNamespace) -> Any:
    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(inputs[0])

    def backward(ctx: Any, g: Tensor) -> tuple[None, Tensor, Tensor]:
        (mask,) = ctx.saved_tensors
        return None, g * mask, g * ~mask

    return register_vmap_op(
        torch.where,
        name=ns.qualname("where"),
        schema="(Tensor mask, Tensor x, Tensor y) -> Tensor",
        fake_fn=lambda m, x, y: torch.empty_like(x),
        vmap_fn=torch.where,
        fake_vmap_fn=lambda m, x, y: torch.empty_like(x),
        backward=backward,
        setup_context=setup,
        sample_inputs=_where_samples,
    )


def _broadcast_samples(device: torch.device) -> Iterator[SampleInput]:
    yield SampleInput((randn(4, seed=60).to(device), randn(3, 4, seed=61).to(device)), name="a4")
    yield SampleInput(
        (randn(1, 5, seed=62).to(device), randn(2, 5, seed=63).to(device)), name="a1x5"
    )


def _broadcast_batched(a: Tensor, x: Tensor) -> Tensor:
    """``sin(a * x)`` with the batch at dim 0 of both: a's sample dims align with x's last."""
    a = a.reshape(a.shape[0], *([1] * (x.dim() - a.dim())), *a.shape[1:])
    return torch.sin(a * x)


def _broadcast(ns: OpNamespace) -> Any:
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor]:
        a, x, _ = ctx.saved_tensors
        c = torch.cos(a * x)
        return g * x * c, g * a * c  # a's gradient has the output's shape: autograd sums it

    return register_vmap_op(
        lambda a, x: torch.sin(a * x),
        name=ns.qualname("broadcast_sin"),
        schema="(Tensor a, Tensor x) -> Tensor",
        fake_fn=lambda a, x: torch.empty_like(x),
        vmap_fn=_broadcast_batched,
        fake_vmap_fn=lambda a, x: torch.empty_like(x),
        backward=backward,
        setup_context=save_inputs,
        sample_inputs=_broadcast_samples,
    )


def _list_samples(device: torch.device) -> Iterator[SampleInput]:
    yield SampleInput(([randn(3, 4, seed=64).to(device), randn(3, 4, seed=65).to(device)],))


def _weighted_list_sum(ns: OpNamespace) -> Any:
    return register_vmap_op(
        lambda xs: xs[0] + 2 * xs[1],
        name=ns.qualname("list_sum"),
        schema="(Tensor[] xs) -> Tensor",
        fake_fn=lambda xs: torch.empty_like(xs[0]),
        vmap_fn=lambda xs: xs[0] + 2 * xs[1],
        fake_vmap_fn=lambda xs: torch.empty_like(xs[0]),
        backward=lambda ctx, g: ([g, 2 * g],),
        sample_inputs=_list_samples,
    )


def _kwarg_samples(device: torch.device) -> Iterator[SampleInput]:
    yield SampleInput((randn(3, 4, seed=66).to(device),), {"alpha": -1.5}, name="alpha=-1.5")
    yield SampleInput((randn(5, seed=67).to(device),), name="default alpha")


def _kwarg(ns: OpNamespace) -> Any:
    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.alpha = inputs[1]

    return register_vmap_op(
        lambda x, *, alpha=1.0: x * alpha,
        name=ns.qualname("scale_kwarg"),
        schema="(Tensor x, *, float alpha=1.0) -> Tensor",
        fake_fn=lambda x, *, alpha=1.0: torch.empty_like(x),
        vmap_fn=lambda x, *, alpha=1.0: x * alpha,
        fake_vmap_fn=lambda x, *, alpha=1.0: torch.empty_like(x),
        backward=lambda ctx, g: (g * ctx.alpha, None),
        setup_context=setup,
        sample_inputs=_kwarg_samples,
    )


def _sincos(ns: OpNamespace) -> Any:
    def backward(ctx: Any, gs: Tensor, gc: Tensor) -> Tensor:
        x = ctx.saved_tensors[0]
        return gs * torch.cos(x) - gc * torch.sin(x)

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(inputs[0])

    def both(x: Tensor) -> tuple[Tensor, Tensor]:
        return torch.sin(x), torch.cos(x)

    return unary(
        ns,
        "sincos",
        both,
        schema="(Tensor x) -> (Tensor, Tensor)",
        fake_fn=lambda x: (torch.empty_like(x), torch.empty_like(x)),
        vmap_fn=both,
        backward=backward,
        setup_context=setup,
    )


def _write_double(x: Tensor, buf: Tensor) -> Tensor:
    buf.copy_(x * 2)
    return x + 1


def _mutation(ns: OpNamespace) -> Any:
    return register_vmap_op(
        _write_double,
        name=ns.qualname("write_double"),
        schema="(Tensor x, Tensor(a!) buf) -> Tensor",
        mutates_args=("buf",),
        fake_fn=lambda x, buf: torch.empty_like(x),
        vmap_fn=_write_double,
        fake_vmap_fn=lambda x, buf: torch.empty_like(x),
        sample_inputs=pairs,
    )


def _center(ns: OpNamespace) -> Any:
    return unary(
        ns,
        "center",
        lambda x: x - x.mean(),
        vmap_fn=lambda x: x - x.mean(rest(x), keepdim=True),
        backward=lambda ctx, g: g - g.mean(),
    )


def _max_shift(ns: OpNamespace) -> Any:
    return unary(
        ns,
        "max_shift",
        lambda x: x - x.amax(),
        vmap_fn=lambda x: x - x.amax(rest(x), keepdim=True),
    )


def _softmax_backward(ctx: Any, g: Tensor) -> Tensor:
    out = ctx.saved_tensors[1]
    return out * (g - (g * out).sum())


def _softmax(ns: OpNamespace) -> Any:
    return unary(
        ns,
        "softmax_all",
        lambda x: x.reshape(-1).softmax(0).reshape(x.shape),
        fake_fn=contiguous_like,
        vmap_fn=lambda x: x.flatten(1).softmax(1).reshape(x.shape),
        backward=_softmax_backward,
        setup_context=save_inputs,
    )


def _cumsum(ns: OpNamespace) -> Any:
    return unary(
        ns,
        "cumsum",
        lambda x: x.cumsum(0),
        vmap_fn=lambda x: x.cumsum(1),
        backward=lambda ctx, g: g.flip(0).cumsum(0).flip(0),
        samples=vectors,
    )


def _sort_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(inputs[0].reshape(-1).sort().indices)


def _sort_backward(ctx: Any, g: Tensor) -> Tensor:
    (indices,) = ctx.saved_tensors
    flat = torch.zeros_like(g.reshape(-1)).scatter(0, indices, g.reshape(-1))
    return flat.reshape(g.shape)


def _sort(ns: OpNamespace) -> Any:
    return unary(
        ns,
        "sort_values",
        lambda x: x.reshape(-1).sort().values.reshape(x.shape),
        fake_fn=contiguous_like,
        vmap_fn=lambda x: x.flatten(1).sort(1).values.reshape(x.shape),
        backward=_sort_backward,
        setup_context=_sort_setup,
    )


def _normalize_backward(ctx: Any, g: Tensor) -> Tensor:
    x, out = ctx.saved_tensors
    return (g - out * (g * out).sum()) / x.norm()


def _normalize(ns: OpNamespace) -> Any:
    return unary(
        ns,
        "normalize",
        lambda x: x / x.norm(),
        vmap_fn=lambda x: x / x.norm(dim=rest(x), keepdim=True),
        backward=_normalize_backward,
        setup_context=save_inputs,
    )


def _matmul_samples(device: torch.device) -> Iterator[SampleInput]:
    x, w = randn(3, 4, seed=68), randn(4, 2, seed=69)
    yield SampleInput((x.to(device), w.to(device)), name="3x4 @ 4x2")


def _matmul(ns: OpNamespace) -> Any:
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor]:
        x, w, _ = ctx.saved_tensors
        return g @ w.mT, x.mT @ g

    return register_vmap_op(
        torch.matmul,
        name=ns.qualname("matmul"),
        schema="(Tensor x, Tensor w) -> Tensor",
        fake_fn=lambda x, w: x.new_empty((x.shape[0], w.shape[1])),
        vmap_fn=torch.matmul,
        fake_vmap_fn=lambda x, w: x.new_empty((x.shape[0], x.shape[1], w.shape[2])),
        backward=backward,
        setup_context=save_inputs,
        sample_inputs=_matmul_samples,
    )


def _square_no_vmap_fn(ns: OpNamespace) -> Any:
    return unary(
        ns,
        "square_per_sample_loop",
        lambda x: x * x,
        backward=lambda ctx, g: 2 * g * ctx.saved_tensors[0],
        setup_context=save_inputs,
    )


def _roll_samples(device: torch.device) -> Iterator[SampleInput]:
    yield SampleInput((randn(3, 4, seed=70).to(device), 3), name="3x4, k=3")


def _roll(ns: OpNamespace) -> Any:
    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.k = inputs[1]

    return register_vmap_op(
        lambda x, k: x.roll(k, -1),
        name=ns.qualname("roll"),
        schema="(Tensor x, int k) -> Tensor",
        fake_fn=lambda x, k: contiguous_like(x),
        vmap_fn=lambda x, k: x.roll(k, -1),
        fake_vmap_fn=lambda x, k: contiguous_like(x),
        backward=lambda ctx, g: (g.roll(-ctx.k, -1), None),
        setup_context=setup,
        sample_inputs=_roll_samples,
    )


def _triton(name: str, what: str) -> CorrectOp:
    def build(ns: OpNamespace) -> VmapOp[Any, Any]:
        from . import triton_ops  # imports Triton: only for runs that have it

        op: VmapOp[Any, Any] = triton_ops.CORRECT_BUILDERS[name](ns)
        return op

    return CorrectOp(name, what, build, triton="required")


CORRECT = [
    _shipped("fused_add"),
    _shipped("philox_uniform"),
    _shipped("philox_normal"),
    CorrectOp("log", "log on positive inputs", _log),
    CorrectOp("sqrt", "sqrt on positive inputs", _sqrt),
    CorrectOp("gather", "gather with an int64 index tensor", _gather),
    CorrectOp("index_select", "index_select with an index tensor", _index_select),
    CorrectOp("integer_arith", "integer floor division and remainder", _integer),
    CorrectOp("where", "where with a bool mask", _where),
    CorrectOp(
        "broadcast_sin",
        "sin(a * x) with a broadcast; its backward returns a's gradient in the output's shape",
        _broadcast,
        needs=NEEDS_CORE_REDUCTION,
    ),
    CorrectOp("list_sum", "a list of tensors in, gradients as a list", _weighted_list_sum),
    CorrectOp("scale_kwarg", "a keyword-only float argument", _kwarg),
    CorrectOp("sincos", "two outputs, a backward taking two gradients", _sincos),
    CorrectOp("write_double", "a declared mutation (mutates_args)", _mutation),
    CorrectOp("center", "x - mean(x), reduced per entry in vmap_fn", _center),
    CorrectOp("max_shift", "x - max(x), reduced per entry in vmap_fn", _max_shift),
    CorrectOp("softmax_all", "softmax over all elements of a sample", _softmax),
    CorrectOp("cumsum", "cumulative sum along the sample's dim", _cumsum),
    CorrectOp("sort_values", "sorted values of a sample, with a backward", _sort),
    CorrectOp("normalize", "x / |x| with a backward", _normalize),
    CorrectOp("matmul", "a matrix product of two inputs", _matmul),
    CorrectOp("square_per_sample_loop", "no vmap_fn: the per-sample loop", _square_no_vmap_fn),
    CorrectOp("roll", "an int argument", _roll),
    _triton("triton_double", "a Triton kernel that handles any layout (interpreter)"),
    _triton("triton_center", "a Triton op with a right batched launcher (interpreter)"),
]


# -- forward mode (ops with a jvp) ----------------------------------------------------------------


def _sin_with_jvp(ns: OpNamespace) -> Any:
    return unary(
        ns,
        "sin_with_jvp",
        torch.sin,
        vmap_fn=torch.sin,
        backward=lambda ctx, g: g * torch.cos(ctx.saved_tensors[0]),
        setup_context=save_inputs,
        jvp=lambda ctx, t: t * torch.cos(ctx.saved_tensors[0]),
    )


def _xyy_jvp(ctx: Any, x_t: Tensor | None, y_t: Tensor | None) -> Tensor:
    x, y, _ = ctx.saved_tensors
    out = torch.zeros_like(x)
    if x_t is not None:
        out = out + x_t * y * y
    if y_t is not None:
        out = out + 2 * x * y * y_t
    return out


def _pair_with_jvp(ns: OpNamespace) -> Any:
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor]:
        x, y, _ = ctx.saved_tensors
        return g * y * y, g * 2 * x * y

    return register_vmap_op(
        lambda x, y: x * y * y,
        name=ns.qualname("xyy_with_jvp"),
        schema="(Tensor x, Tensor y) -> Tensor",
        fake_fn=lambda x, y: torch.empty_like(x),
        vmap_fn=lambda x, y: x * y * y,
        fake_vmap_fn=lambda x, y: torch.empty_like(x),
        backward=backward,
        setup_context=save_inputs,
        jvp=_xyy_jvp,
        sample_inputs=pairs,
    )


def _exp_forward_only(ns: OpNamespace) -> Any:
    return unary(
        ns,
        "exp_forward_only",
        torch.exp,
        vmap_fn=torch.exp,
        setup_context=save_inputs,
        jvp=lambda ctx, t: t * ctx.saved_tensors[1],  # the saved output
    )


def _broadcast_jvp(ctx: Any, a_t: Tensor | None, x_t: Tensor | None) -> Tensor:
    a, x, out = ctx.saved_tensors
    inner = torch.zeros_like(out)
    if a_t is not None:
        inner = inner + a_t * x  # a's tangent has a's shape: the product broadcasts it
    if x_t is not None:
        inner = inner + a * x_t
    return inner * torch.cos(a * x)


def _broadcast_with_jvp(ns: OpNamespace) -> Any:
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor]:
        a, x, _ = ctx.saved_tensors
        c = torch.cos(a * x)
        return g * x * c, g * a * c

    return register_vmap_op(
        lambda a, x: torch.sin(a * x),
        name=ns.qualname("broadcast_sin_with_jvp"),
        schema="(Tensor a, Tensor x) -> Tensor",
        fake_fn=lambda a, x: torch.empty_like(x),
        vmap_fn=_broadcast_batched,
        fake_vmap_fn=lambda a, x: torch.empty_like(x),
        backward=backward,
        setup_context=save_inputs,
        jvp=_broadcast_jvp,
        sample_inputs=_broadcast_samples,
    )


def _list_with_jvp(ns: OpNamespace) -> Any:
    def jvp(ctx: Any, xs_t: list[Tensor | None] | None) -> Tensor | None:
        if xs_t is None:
            return None
        a_t, b_t = xs_t
        if a_t is None:
            return None if b_t is None else 2 * b_t
        return a_t if b_t is None else a_t + 2 * b_t

    return register_vmap_op(
        lambda xs: xs[0] + 2 * xs[1],
        name=ns.qualname("list_sum_with_jvp"),
        schema="(Tensor[] xs) -> Tensor",
        fake_fn=lambda xs: torch.empty_like(xs[0]),
        vmap_fn=lambda xs: xs[0] + 2 * xs[1],
        fake_vmap_fn=lambda xs: torch.empty_like(xs[0]),
        backward=lambda ctx, g: ([g, 2 * g],),
        jvp=jvp,
        sample_inputs=_list_samples,
    )


CORRECT += [
    CorrectOp("sin_with_jvp", "sin with a backward and a jvp", _sin_with_jvp),
    CorrectOp("xyy_with_jvp", "x * y * y with a backward and a jvp", _pair_with_jvp),
    CorrectOp("exp_forward_only", "exp with a jvp and no backward", _exp_forward_only),
    CorrectOp(
        "broadcast_sin_with_jvp",
        "sin(a * x) with a broadcast; the jvp gets a's tangent in a's shape",
        _broadcast_with_jvp,
        needs=NEEDS_CORE_REDUCTION,
    ),
    CorrectOp("list_sum_with_jvp", "a list input: its tangents come as a list", _list_with_jvp),
]


# -- once differentiable (double backward declined with a clear error) ----------------------------


def _once_differentiable_inner_op(ns: OpNamespace) -> Any:
    # The backward calls an op registered without a backward (as a Triton backward registered
    # as its own op is): first derivatives everywhere, double backward raises opreg's error.
    cos_plain = unary(ns, "cos_without_backward", torch.cos, vmap_fn=torch.cos)
    return unary(
        ns,
        "once_differentiable_inner_op",
        torch.sin,
        vmap_fn=torch.sin,
        backward=lambda ctx, g: g * cos_plain(ctx.saved_tensors[0]),
        setup_context=save_inputs,
    )


@once_differentiable
def _decorated_backward(ctx: Any, g: Tensor) -> Tensor:
    return g * torch.cos(ctx.saved_tensors[0])


def _once_differentiable_decorated(ns: OpNamespace) -> Any:
    return unary(
        ns,
        "once_differentiable_decorated",
        torch.sin,
        vmap_fn=torch.sin,
        backward=_decorated_backward,
        setup_context=save_inputs,
    )


CORRECT += [
    CorrectOp(
        "once_differentiable_inner_op",
        "a backward calling an op registered without a backward: once differentiable",
        _once_differentiable_inner_op,
    ),
    CorrectOp(
        "once_differentiable_decorated",
        "a backward decorated with torch.autograd.function.once_differentiable",
        _once_differentiable_decorated,
    ),
    _triton(
        "once_differentiable_triton",
        "a backward calling a Triton op registered without a backward (interpreter)",
    ),
]


# -- rules built with torch.func (as authors write them for an op made of torch calls) ------------


def _silu(x: Tensor) -> Tensor:
    return x * torch.sigmoid(x)


def _silu_func_rules(ns: OpNamespace) -> Any:
    def backward(ctx: Any, g: Tensor) -> Tensor:
        (grad_x,) = torch.func.vjp(_silu, ctx.saved_tensors[0])[1](g)
        return grad_x  # type: ignore[no-any-return]

    def jvp(ctx: Any, x_t: Tensor) -> Tensor:
        tangent: Tensor = torch.func.jvp(_silu, (ctx.saved_tensors[0],), (x_t,))[1]
        return tangent

    return unary(
        ns,
        "silu_func_rules",
        _silu,
        vmap_fn=_silu,
        backward=backward,
        setup_context=save_inputs,
        jvp=jvp,
    )


def _x_sin_y(x: Tensor, y: Tensor) -> Tensor:
    return x * torch.sin(y)


def _pair_func_rules(ns: OpNamespace) -> Any:
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor]:
        x, y, _ = ctx.saved_tensors
        grad_x, grad_y = torch.func.vjp(_x_sin_y, x, y)[1](g)
        return grad_x, grad_y

    def jvp(ctx: Any, x_t: Tensor | None, y_t: Tensor | None) -> Tensor:
        x, y, _ = ctx.saved_tensors
        x_t = torch.zeros_like(x) if x_t is None else x_t
        y_t = torch.zeros_like(y) if y_t is None else y_t
        tangent: Tensor = torch.func.jvp(_x_sin_y, (x, y), (x_t, y_t))[1]
        return tangent

    return register_vmap_op(
        _x_sin_y,
        name=ns.qualname("x_sin_y_func_rules"),
        schema="(Tensor x, Tensor y) -> Tensor",
        fake_fn=lambda x, y: torch.empty_like(x),
        vmap_fn=_x_sin_y,
        fake_vmap_fn=lambda x, y: torch.empty_like(x),
        backward=backward,
        setup_context=save_inputs,
        jvp=jvp,
        sample_inputs=pairs,
    )


CORRECT += [
    CorrectOp(
        "silu_func_rules", "silu, its backward and jvp from torch.func.vjp/jvp", _silu_func_rules
    ),
    CorrectOp(
        "x_sin_y_func_rules",
        "x * sin(y), its backward and jvp from torch.func.vjp/jvp of the function",
        _pair_func_rules,
    ),
]


# -- Triton kernels computing in float32 (finite differences on the fallbacks) ----------------

CORRECT += [
    _triton(
        "triton_rmsnorm_float32",
        "RMSNorm whose Triton kernels compute in float32, its backward a Triton op without a "
        "backward (examples/triton_rmsnorm.py): once differentiable (interpreter)",
    ),
    _triton(
        "triton_rmsnorm_input_dtype",
        "RMSNorm whose Triton kernels compute in the input dtype (float64 for float64 inputs), "
        "its backward a Triton op without a backward (interpreter)",
    ),
]
