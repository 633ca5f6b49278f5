"""Every argument and return type opreg supports, on every path, against the plain function.

Each case is an op written the way authors write one (a pure-torch function that is also its
own fake where torch runs on fake tensors, a batched ``vmap_fn``, a hand-written backward and
jvp), registered from its annotations and from an explicit ``schema=``. Each runs in eager,
``torch.compile``, fake mode, ``torch.vmap`` (several in_dims, None for a tensor, an optional
tensor given None, two nested levels), ``.backward()``, ``torch.func.grad``, ``vmap(grad)``,
``torch.func.jvp``, ``vmap(jvp)`` and ``opreg_testing.check_op``; the plain function (the op's
own Python body, called directly) gives the expected values everywhere. The types opreg
refuses are refused at registration with an error naming the op and the argument.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import pytest
import torch
from torch import Tensor
from torch.utils._pytree import tree_flatten, tree_map_only

from opreg_core import SampleInput, register_vmap_op, registered_ops
from opreg_testing import check_op


def r(*shape: int) -> Tensor:
    return torch.randn(*shape, dtype=torch.float64)


# -- the ops ----------------------------------------------------------------------------------


# Tensor? (an optional tensor)
def opt_tensor(x: Tensor, w: Tensor | None = None) -> Tensor:
    return x * 2 if w is None else x * w


def opt_tensor_backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
    x, w = ctx.saved_tensors
    if not ctx.has_w:
        return g * 2, None
    return g * w, g * x


def save_all(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    """Save every tensor input (lists spread, None kept as a flag) and the plain values."""
    ctx.layout = [
        (len(v), [e is None for e in v]) if isinstance(v, list) else v is None
        for v in inputs
        if isinstance(v, (Tensor, list)) or v is None
    ]
    ctx.plain = [v for v in inputs if not isinstance(v, (Tensor, list)) and v is not None]
    flat = [e for e in tree_flatten(list(inputs))[0] if isinstance(e, Tensor)]
    ctx.save_for_backward(*flat)


def saved(ctx: Any) -> list[Any]:
    """The tensor inputs ``save_all`` saved, in order, lists rebuilt (None where None)."""
    it = iter(ctx.saved_tensors)
    out: list[Any] = []
    for entry in ctx.layout:
        if isinstance(entry, tuple):
            out.append([None if none else next(it) for none in entry[1]])
        else:
            out.append(None if entry else next(it))
    return out


def opt_tensor_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, w = inputs
    ctx.has_w = w is not None
    ctx.save_for_backward(x, x if w is None else w)


def opt_tensor_jvp(ctx: Any, x_t: Tensor | None, w_t: Tensor | None) -> Tensor:
    x, w = ctx.saved_tensors
    if not ctx.has_w:
        return x_t * 2 if x_t is not None else torch.zeros_like(x)
    out = torch.zeros_like(x)
    if x_t is not None:
        out = out + x_t * w
    if w_t is not None:
        out = out + x * w_t
    return out


# int[] and bool (reduction dims)
def sum_dims(x: Tensor, dims: list[int], keepdim: bool = False) -> Tensor:
    return x.sum(dims, keepdim=keepdim)


def sum_dims_batched(x: Tensor, dims: list[int], keepdim: bool = False) -> Tensor:
    # The batch is dim 0: shift each (per-sample) dim past it; the int list is not batched.
    n = x.dim() - 1
    return x.sum([d % n + 1 for d in dims], keepdim=keepdim)


def sum_dims_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, dims, keepdim = inputs
    ctx.shape, ctx.dims, ctx.keepdim = x.shape, [d % x.dim() for d in dims], keepdim


def sum_dims_backward(ctx: Any, g: Tensor) -> tuple[Tensor, None, None]:
    if not ctx.keepdim:
        for d in sorted(ctx.dims):
            g = g.unsqueeze(d)
    return g.expand(ctx.shape), None, None


def sum_dims_jvp(ctx: Any, x_t: Tensor | None, dims_t: None, keepdim_t: None) -> Tensor | None:
    return None if x_t is None else x_t.sum(ctx.dims, keepdim=ctx.keepdim)


# torch.dtype (ScalarType)
def cast_scale(x: Tensor, dtype: torch.dtype) -> Tensor:
    return x.to(dtype) * 2


def cast_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.in_dtype, ctx.dtype = inputs[0].dtype, inputs[1]


def cast_backward(ctx: Any, g: Tensor) -> tuple[Tensor, None]:
    return (g * 2).to(ctx.in_dtype), None


def cast_jvp(ctx: Any, x_t: Tensor | None, dtype_t: None) -> Tensor | None:
    return None if x_t is None else x_t.to(ctx.dtype) * 2


# float? and int? (optional scalars)
def opt_scalars(x: Tensor, alpha: float | None = None, n: int | None = None) -> Tensor:
    y = x * (1.0 if alpha is None else alpha)
    return y if n is None else y + n


def opt_scalars_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.alpha = 1.0 if inputs[1] is None else inputs[1]


def opt_scalars_backward(ctx: Any, g: Tensor) -> tuple[Tensor, None, None]:
    return g * ctx.alpha, None, None


def opt_scalars_jvp(ctx: Any, x_t: Tensor | None, a_t: None, n_t: None) -> Tensor | None:
    return None if x_t is None else x_t * ctx.alpha


# bool and str
def bool_str(x: Tensor, square: bool, mode: str) -> Tensor:
    y = x * x if square else x * 3
    return -y if mode == "neg" else y


def bool_str_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, ctx.square, mode = inputs
    ctx.sign = -1.0 if mode == "neg" else 1.0
    ctx.save_for_backward(x)


def bool_str_backward(ctx: Any, g: Tensor) -> tuple[Tensor, None, None]:
    (x,) = ctx.saved_tensors
    return g * ctx.sign * (2 * x if ctx.square else 3), None, None


def bool_str_jvp(ctx: Any, x_t: Tensor | None, s_t: None, m_t: None) -> Tensor | None:
    (x,) = ctx.saved_tensors
    return None if x_t is None else x_t * ctx.sign * (2 * x if ctx.square else 3)


# Tensor[] (a list of tensors)
def weighted_sum(xs: list[Tensor], w: Tensor) -> Tensor:
    out = torch.zeros_like(w)
    for x in xs:
        out = out + x * w
    return out


def weighted_sum_backward(ctx: Any, g: Tensor) -> tuple[list[Tensor], Tensor]:
    xs, w = saved(ctx)
    return [g * w for _ in xs], g * sum(xs)


def weighted_sum_jvp(ctx: Any, xs_t: list[Tensor | None] | None, w_t: Tensor | None) -> Tensor:
    xs, w = saved(ctx)
    out = torch.zeros_like(w)
    for x, x_t in zip(xs, xs_t or [None] * len(xs), strict=True):
        if x_t is not None:
            out = out + x_t * w
        if w_t is not None:
            out = out + x * w_t
    return out


# Tensor?[] (a list of optional tensors)
def add_scaled(x: Tensor, terms: list[Tensor | None]) -> Tensor:
    out = x.clone()
    for t in terms:
        if t is not None:
            out = out + t * x
    return out


def add_scaled_backward(ctx: Any, g: Tensor) -> tuple[Tensor, list[Tensor | None]]:
    x, terms = saved(ctx)
    total = sum((t for t in terms if t is not None), torch.ones_like(x))
    return g * total, [None if t is None else g * x for t in terms]


def add_scaled_jvp(ctx: Any, x_t: Tensor | None, terms_t: list[Tensor | None] | None) -> Tensor:
    x, terms = saved(ctx)
    out = torch.zeros_like(x)
    total = sum((t for t in terms if t is not None), torch.ones_like(x))
    if x_t is not None:
        out = out + x_t * total
    for t, t_t in zip(terms, terms_t or [None] * len(terms), strict=True):
        if t is not None and t_t is not None:
            out = out + t_t * x
    return out


# -> (Tensor, Tensor)
def sum_prod(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    return x + y, x * y


def sum_prod_backward(ctx: Any, ga: Tensor, gb: Tensor) -> tuple[Tensor, Tensor]:
    x, y = ctx.saved_tensors
    return ga + gb * y, ga + gb * x


def sum_prod_jvp(ctx: Any, x_t: Tensor | None, y_t: Tensor | None) -> tuple[Tensor, Tensor]:
    x, y = ctx.saved_tensors
    x_t = torch.zeros_like(x) if x_t is None else x_t
    y_t = torch.zeros_like(y) if y_t is None else y_t
    return x_t + y_t, x_t * y + x * y_t


# Scalar (int | float | bool)
def times_scalar(x: Tensor, s: float | int | bool) -> Tensor:
    return x * s


def scalar_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.s = inputs[1]


def times_scalar_backward(ctx: Any, g: Tensor) -> tuple[Tensor, None]:
    return g * ctx.s, None


def times_scalar_jvp(ctx: Any, x_t: Tensor | None, s_t: None) -> Tensor | None:
    return None if x_t is None else x_t * ctx.s


# Device
def to_device(x: Tensor, device: torch.device) -> Tensor:
    return x.to(device) * 3


def to_device_backward(ctx: Any, g: Tensor) -> tuple[Tensor, None]:
    return g * 3, None


def to_device_jvp(ctx: Any, x_t: Tensor | None, d_t: None) -> Tensor | None:
    return None if x_t is None else x_t * 3


# int[]? and float[]? (optional lists of plain values)
def opt_lists(x: Tensor, dims: list[int] | None = None, w: list[float] | None = None) -> Tensor:
    y = x.sum(dims) if dims is not None else x.sum(0)
    return y * (1.0 if w is None else sum(w))


def opt_lists_batched(x: Tensor, dims: list[int] | None = None, w: list[float] | None = None):
    n = x.dim() - 1
    y = x.sum([d % n + 1 for d in dims]) if dims is not None else x.sum(1)
    return y * (1.0 if w is None else sum(w))


def opt_lists_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, dims, w = inputs
    ctx.shape, ctx.dims = x.shape, [0] if dims is None else [d % x.dim() for d in dims]
    ctx.scale = 1.0 if w is None else sum(w)


def opt_lists_backward(ctx: Any, g: Tensor) -> tuple[Tensor, None, None]:
    for d in sorted(ctx.dims):
        g = g.unsqueeze(d)
    return g.expand(ctx.shape) * ctx.scale, None, None


def opt_lists_jvp(ctx: Any, x_t: Tensor | None, d_t: None, w_t: None) -> Tensor | None:
    return None if x_t is None else x_t.sum(ctx.dims) * ctx.scale


# keyword-only Tensor? and float
def kw_scale(x: Tensor, *, w: Tensor | None = None, scale: float = 1.0) -> Tensor:
    return x * scale if w is None else x * w * scale


def kw_scale_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, w, ctx.scale = inputs  # setup_context gets every input, kwarg-only ones last
    ctx.has_w = w is not None
    ctx.save_for_backward(x, x if w is None else w)


def kw_scale_backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor | None, None]:
    x, w = ctx.saved_tensors
    if not ctx.has_w:
        return g * ctx.scale, None, None
    return g * w * ctx.scale, g * x * ctx.scale, None


def kw_scale_jvp(ctx: Any, x_t: Tensor | None, w_t: Tensor | None, s_t: None) -> Tensor:
    x, w = ctx.saved_tensors
    out = torch.zeros_like(x)
    if x_t is not None:
        out = out + x_t * (w if ctx.has_w else 1.0) * ctx.scale
    if ctx.has_w and w_t is not None:
        out = out + x * w_t * ctx.scale
    return out


# SymInt[] and ScalarType? (explicit schema: a shape and an optional dtype)
def reshape_cast(x: Tensor, shape: list[int], dtype: torch.dtype | None = None) -> Tensor:
    y = x.reshape(shape) * 2
    return y if dtype is None else y.to(dtype)


def reshape_cast_batched(x: Tensor, shape: list[int], dtype: torch.dtype | None = None):
    y = x.reshape(x.shape[0], *shape) * 2
    return y if dtype is None else y.to(dtype)


def reshape_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, shape, dtype = inputs
    ctx.in_shape, ctx.in_dtype, ctx.shape, ctx.dtype = x.shape, x.dtype, shape, dtype


def reshape_backward(ctx: Any, g: Tensor) -> tuple[Tensor, None, None]:
    return (g.reshape(ctx.in_shape) * 2).to(ctx.in_dtype), None, None


def reshape_jvp(ctx: Any, x_t: Tensor | None, s_t: None, d_t: None) -> Tensor | None:
    if x_t is None:
        return None
    y = x_t.reshape(ctx.shape) * 2
    return y if ctx.dtype is None else y.to(ctx.dtype)


# -> (Tensor, int): a plain output next to a tensor
def double_and_len(x: Tensor) -> tuple[Tensor, int]:
    return x * 2, x.shape[0]


def double_and_len_batched(x: Tensor) -> tuple[Tensor, int]:
    return x * 2, x.shape[1]  # the per-sample length: the batch is dim 0


def double_backward(ctx: Any, g: Tensor, g_len: None) -> Tensor:
    return g * 2


def double_and_len_jvp(ctx: Any, x_t: Tensor | None) -> tuple[Tensor | None, None]:
    return (None if x_t is None else x_t * 2), None


# -> Tensor[] (a list output; no jvp: autograd tracks no tangent on a list)
def pieces(x: Tensor) -> list[Tensor]:
    return [x * 2, x + 1]


def pieces_backward(ctx: Any, gs: list[Tensor]) -> Tensor:
    return gs[0] * 2 + gs[1]


# -- the cases --------------------------------------------------------------------------------

#: One entry per single vmap level: (in_dims, args); two nested levels are built from each.
VmapCall = tuple[tuple[Any, ...], tuple[Any, ...]]


@dataclass
class Case:
    name: str
    fn: Callable[..., Any]
    schema: str
    samples: list[SampleInput]
    vmaps: list[VmapCall]
    vmap_fn: Callable[..., Any] | None = None  #: default: ``fn`` (an elementwise op)
    setup_context: Callable[..., Any] | None = save_all
    backward: Callable[..., Any] | None = None
    jvp: Callable[..., Any] | None = None
    options: dict[str, Any] = field(default_factory=dict)


CASES = [
    Case(
        "opt_tensor",
        opt_tensor,
        "(Tensor x, Tensor? w=None) -> Tensor",
        [SampleInput((r(3), r(3))), SampleInput((r(3), None)), SampleInput((r(3),))],
        [
            ((0, 0), (r(4, 3), r(4, 3))),
            ((1, None), (r(3, 4), r(3))),
            ((None, 0), (r(3), r(4, 3))),
            ((0, None), (r(4, 3), None)),
        ],
        setup_context=opt_tensor_setup,
        backward=opt_tensor_backward,
        jvp=opt_tensor_jvp,
    ),
    Case(
        "sum_dims",
        sum_dims,
        "(Tensor x, SymInt[] dims, bool keepdim=False) -> Tensor",
        [
            SampleInput((r(3, 4, 5), [0, 2])),
            SampleInput((r(3, 4, 5), [-1], True)),
        ],
        [((0, None), (r(2, 3, 4, 5), [0, 2])), ((2, None, None), (r(3, 4, 2, 5), [1], True))],
        vmap_fn=sum_dims_batched,
        setup_context=sum_dims_setup,
        backward=sum_dims_backward,
        jvp=sum_dims_jvp,
    ),
    Case(
        "cast_scale",
        cast_scale,
        "(Tensor x, ScalarType dtype) -> Tensor",
        [SampleInput((r(3), torch.float64)), SampleInput((r(3).float(), torch.float64))],
        [((0, None), (r(4, 3), torch.float64)), ((1, None), (r(3, 4).float(), torch.float64))],
        setup_context=cast_setup,
        backward=cast_backward,
        jvp=cast_jvp,
    ),
    Case(
        "opt_scalars",
        opt_scalars,
        "(Tensor x, float? alpha=None, SymInt? n=None) -> Tensor",
        [SampleInput((r(3), 2.0, 3)), SampleInput((r(3), None, None)), SampleInput((r(3),))],
        [((0, None, None), (r(4, 3), 2.0, None)), ((1, None, None), (r(3, 4), None, 2))],
        setup_context=opt_scalars_setup,
        backward=opt_scalars_backward,
        jvp=opt_scalars_jvp,
    ),
    Case(
        "bool_str",
        bool_str,
        "(Tensor x, bool square, str mode) -> Tensor",
        [SampleInput((r(3), True, "neg")), SampleInput((r(3), False, "id"))],
        [((0, None, None), (r(4, 3), True, "neg")), ((1, None, None), (r(3, 4), False, "x"))],
        setup_context=bool_str_setup,
        backward=bool_str_backward,
        jvp=bool_str_jvp,
    ),
    Case(
        "weighted_sum",
        weighted_sum,
        "(Tensor[] xs, Tensor w) -> Tensor",
        [SampleInput(([r(3), r(3)], r(3))), SampleInput(([r(3)], r(3)))],
        [
            (([0, 0], 0), ([r(4, 3), r(4, 3)], r(4, 3))),
            (([None, 1], None), ([r(3), r(3, 4)], r(3))),
            ((None, 0), ([r(3), r(3)], r(4, 3))),
        ],
        backward=weighted_sum_backward,
        jvp=weighted_sum_jvp,
    ),
    Case(
        "add_scaled",
        add_scaled,
        "(Tensor x, Tensor?[] terms) -> Tensor",
        [SampleInput((r(3), [r(3), None, r(3)])), SampleInput((r(3), [None]))],
        [
            ((0, [0, None, 0]), (r(4, 3), [r(4, 3), None, r(4, 3)])),
            ((None, [None, None, 1]), (r(3), [r(3), None, r(3, 4)])),
            ((0, None), (r(4, 3), [None, r(3)])),
        ],
        backward=add_scaled_backward,
        jvp=add_scaled_jvp,
    ),
    Case(
        "sum_prod",
        sum_prod,
        "(Tensor x, Tensor y) -> (Tensor, Tensor)",
        [SampleInput((r(3), r(3)))],
        [((0, None), (r(4, 3), r(3))), ((1, 0), (r(3, 4), r(4, 3)))],
        setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs),
        backward=sum_prod_backward,
        jvp=sum_prod_jvp,
    ),
    Case(
        "times_scalar",
        times_scalar,
        "(Tensor x, Scalar s) -> Tensor",
        [SampleInput((r(3), 2)), SampleInput((r(3), 1.5)), SampleInput((r(3), True))],
        [((0, None), (r(4, 3), 2.5)), ((1, None), (r(3, 4), 3))],
        setup_context=scalar_setup,
        backward=times_scalar_backward,
        jvp=times_scalar_jvp,
    ),
    Case(
        "to_device",
        to_device,
        "(Tensor x, Device device) -> Tensor",
        [SampleInput((r(3), torch.device("cpu")))],
        [((0, None), (r(4, 3), torch.device("cpu")))],
        backward=to_device_backward,
        jvp=to_device_jvp,
    ),
    Case(
        "opt_lists",
        opt_lists,
        "(Tensor x, SymInt[]? dims=None, float[]? w=None) -> Tensor",
        [SampleInput((r(3, 4), [1], [1.0, 2.0])), SampleInput((r(3, 4), None, None))],
        [((0, None, None), (r(2, 3, 4), [1], [0.5])), ((2, None, None), (r(3, 4, 2), None, None))],
        vmap_fn=opt_lists_batched,
        setup_context=opt_lists_setup,
        backward=opt_lists_backward,
        jvp=opt_lists_jvp,
    ),
    Case(
        "kw_scale",
        kw_scale,
        "(Tensor x, *, Tensor? w=None, float scale=1.0) -> Tensor",
        [
            SampleInput((r(3),), {"w": r(3)}),
            SampleInput((r(3),), {"scale": 2.0}),
            SampleInput((r(3),), {"w": None, "scale": 0.5}),
        ],
        [((0,), (r(4, 3),))],
        setup_context=kw_scale_setup,
        backward=kw_scale_backward,
        jvp=kw_scale_jvp,
    ),
    Case(
        "reshape_cast",
        reshape_cast,
        "(Tensor x, SymInt[] shape, ScalarType? dtype=None) -> Tensor",
        [SampleInput((r(6), [2, 3])), SampleInput((r(6), [3, 2], torch.float64))],
        [((0, None), (r(4, 6), [2, 3])), ((1, None, None), (r(6, 4), [3, 2], torch.float64))],
        vmap_fn=reshape_cast_batched,
        setup_context=reshape_setup,
        backward=reshape_backward,
        jvp=reshape_jvp,
    ),
    Case(
        "double_and_len",
        double_and_len,
        "(Tensor x) -> (Tensor, SymInt)",
        [SampleInput((r(3),))],
        [((0,), (r(4, 3),)), ((1,), (r(3, 4),))],
        vmap_fn=double_and_len_batched,
        setup_context=None,
        backward=double_backward,
        jvp=double_and_len_jvp,
    ),
    Case(
        "pieces",
        pieces,
        "(Tensor x) -> Tensor[]",
        [SampleInput((r(3),))],
        [((0,), (r(4, 3),)), ((1,), (r(3, 4),))],
        setup_context=None,
        backward=pieces_backward,
    ),
]

HOWS = [(c, how) for c in CASES for how in ("annotations", "schema")]
IDS = [f"{c.name}-{how}" for c, how in HOWS]


def register(case: Case, how: str, ns: str, *, vmap_fn: bool = True) -> Any:
    batched = case.vmap_fn or case.fn
    options: dict[str, Any] = {
        "fake_fn": case.fn,  # pure torch: runs on fake tensors too
        "name": f"{ns}::{case.name}",
        "backward": case.backward,
        "setup_context": case.setup_context if case.backward or case.jvp else None,
        "jvp": case.jvp,
        "sample_inputs": lambda device: case.samples,
        **case.options,
    }
    if vmap_fn:
        options.update(vmap_fn=batched, fake_vmap_fn=batched)
    if how == "schema":
        options["schema"] = case.schema
    op = register_vmap_op(case.fn, **options)
    assert op.schema == case.schema
    return op


# -- comparing ----------------------------------------------------------------------------------


def assert_same(actual: Any, expected: Any) -> None:
    if isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected) and len(actual) == len(expected), (actual, expected)
        for a, e in zip(actual, expected, strict=True):
            assert_same(a, e)
    elif isinstance(expected, Tensor):
        torch.testing.assert_close(actual, expected)
    else:
        assert actual == expected


def tensors_of(out: Any) -> tuple[Tensor, ...]:
    """The differentiable tensor outputs (a list output spread)."""
    return tuple(t for t in tree_flatten(out)[0] if isinstance(t, Tensor) and t.is_floating_point())


def loss(out: Any) -> Tensor:
    """A scalar of every tensor output, weighted so that no gradient is trivially uniform."""
    total = torch.zeros((), dtype=torch.float64)
    for t in tensors_of(out):
        w = torch.linspace(0.5, 1.5, t.numel(), dtype=torch.float64).reshape(t.shape)
        total = total + (t.double() * w).sum()
    return total


def first_float(args: tuple[Any, ...]) -> int:
    return next(i for i, a in enumerate(args) if isinstance(a, Tensor) and a.is_floating_point())


def with_arg(args: tuple[Any, ...], index: int, value: Any) -> tuple[Any, ...]:
    return (*args[:index], value, *args[index + 1 :])


def nested(dims: tuple[Any, ...], args: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """An outer vmap level over ``args``: each argument batched at the inner level gets a new
    leading dim of size 2 (outer in_dims 0); the others stay unbatched (None)."""

    def grow(a: Any, d: Any) -> Any:
        if d is None:
            return a
        if isinstance(d, list):
            return [None if e is None else grow(e, de) for e, de in zip(a, d, strict=True)]
        return torch.stack([a, a * 0.5])

    def outer(d: Any) -> Any:
        if isinstance(d, list):
            return [None if de is None else 0 for de in d]
        return None if d is None else 0

    return tuple(outer(d) for d in dims), tuple(grow(a, d) for a, d in zip(args, dims, strict=True))


# -- the paths ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("case", "how"), HOWS, ids=IDS)
def test_eager_compile_and_fake(ns: str, case: Case, how: str) -> None:
    op = register(case, how, ns)
    torch._dynamo.reset()
    compiled = torch.compile(lambda *a, **k: op(*a, **k), fullgraph=True, backend="aot_eager")
    for s in case.samples:
        expected = case.fn(*s.args, **s.kwargs)
        assert_same(op(*s.args, **s.kwargs), expected)
        assert_same(compiled(*s.args, **s.kwargs), expected)
        with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
            fake_args, fake_kwargs = tree_map_only(Tensor, mode.from_tensor, (s.args, s.kwargs))
            fake = op(*fake_args, **fake_kwargs)
        for f, e in zip(tree_flatten(fake)[0], tree_flatten(expected)[0], strict=True):
            if isinstance(e, Tensor):
                assert (f.shape, f.dtype) == (e.shape, e.dtype)


def twice(f: Callable[..., Any], inner: Any, outer: Any, od: Any, args: tuple[Any, ...]) -> Any:
    """``f`` under two nested vmaps (``inner`` in_dims inside, ``outer`` outside)."""
    return torch.vmap(torch.vmap(f, in_dims=inner, out_dims=od), in_dims=outer, out_dims=od)(*args)


@pytest.mark.parametrize("vmap_fn", [True, False], ids=["vmap_fn", "no_vmap_fn"])
@pytest.mark.parametrize(("case", "how"), HOWS, ids=IDS)
def test_vmap(ns: str, case: Case, how: str, vmap_fn: bool) -> None:
    """Each in_dims, and two nested levels over it, against vmap of the plain function; with
    ``vmap_fn``, and without (PyTorch's per-sample fallback, or opreg's loop where PyTorch has
    none)."""
    op = register(case, how, ns, vmap_fn=vmap_fn)
    od = op.vmap_out_dims if len(op.vmap_out_dims) > 1 else op.vmap_out_dims[0]
    for dims, args in case.vmaps:
        expected = torch.vmap(case.fn, in_dims=dims, out_dims=od)(*args)
        assert_same(torch.vmap(op, in_dims=dims, out_dims=od)(*args), expected)
        outer, args2 = nested(dims, args)
        assert_same(twice(op, dims, outer, od, args2), twice(case.fn, dims, outer, od, args2))
    if vmap_fn:
        assert op.vmap_stats.fast > 0 and op.vmap_stats.loop == 0


def leaves(args: Any) -> Any:
    """``args`` with every floating tensor a fresh leaf that requires grad."""
    return tree_map_only(
        Tensor, lambda t: t.detach().clone().requires_grad_(t.is_floating_point()), args
    )


@pytest.mark.parametrize(("case", "how"), HOWS, ids=IDS)
def test_backward(ns: str, case: Case, how: str) -> None:
    """``.backward()`` gives every tensor input (list elements too) the plain function's
    gradient (None for a tensor the output does not depend on)."""
    op = register(case, how, ns)
    for s in case.samples:
        grads = []
        for f in (op, case.fn):
            args, kwargs = leaves((s.args, s.kwargs))
            loss(f(*args, **kwargs)).backward()
            grads.append([t.grad for t in tree_flatten((args, kwargs))[0] if isinstance(t, Tensor)])
        assert_same(grads[0], grads[1])


def differentiable(value: Any) -> bool:
    """What ``torch.func.grad`` differentiates: a tensor or a list of only tensors."""
    return isinstance(value, Tensor) or (
        isinstance(value, list) and all(isinstance(e, Tensor) for e in value)
    )


def func_grad(f: Callable[..., Any], s: SampleInput) -> Any:
    argnums = tuple(i for i, a in enumerate(s.args) if differentiable(a))
    return torch.func.grad(lambda *a: loss(f(*a, **s.kwargs)), argnums=argnums)(*s.args)


def vmap_grad(f: Callable[..., Any], dims: tuple[Any, ...], args: tuple[Any, ...]) -> Any:
    i = first_float(args)
    return torch.vmap(torch.func.grad(lambda *a: loss(f(*a)), argnums=i), in_dims=dims)(*args)


@pytest.mark.parametrize(("case", "how"), HOWS, ids=IDS)
def test_func_grad(ns: str, case: Case, how: str) -> None:
    """``torch.func.grad`` over every tensor argument (a list input gets a list of gradients),
    and ``vmap(grad)`` over the first vmap case."""
    op = register(case, how, ns)
    for s in case.samples:
        assert_same(func_grad(op, s), func_grad(case.fn, s))
    dims, args = case.vmaps[0]
    assert_same(vmap_grad(op, dims, args), vmap_grad(case.fn, dims, args))


def jvp_along_first(f: Callable[..., Any], args: tuple[Any, ...], kwargs: Any) -> Any:
    """``torch.func.jvp`` of ``f``'s tensor outputs along its first floating argument."""
    i = first_float(args)

    def h(t: Tensor) -> Any:
        return tensors_of(f(*with_arg(args, i, t), **kwargs))

    return torch.func.jvp(h, (args[i],), (torch.ones_like(args[i]),))


def vmap_jvp(f: Callable[..., Any], dims: tuple[Any, ...], args: tuple[Any, ...]) -> Any:
    return torch.vmap(lambda *a: jvp_along_first(f, a, {}), in_dims=dims)(*args)


JVP_HOWS = [(h, i) for h, i in zip(HOWS, IDS, strict=True) if h[0].jvp is not None]


@pytest.mark.parametrize(("case", "how"), [h for h, _ in JVP_HOWS], ids=[i for _, i in JVP_HOWS])
def test_jvp(ns: str, case: Case, how: str) -> None:
    """``torch.func.jvp`` along the first tensor argument, and ``vmap(jvp)``."""
    op = register(case, how, ns)
    for s in case.samples:
        expected = jvp_along_first(case.fn, s.args, s.kwargs)
        assert_same(jvp_along_first(op, s.args, s.kwargs), expected)
    dims, args = case.vmaps[0]
    assert_same(vmap_jvp(op, dims, args), vmap_jvp(case.fn, dims, args))


@pytest.mark.parametrize(("case", "how"), HOWS, ids=IDS)
def test_check_op_passes(ns: str, case: Case, how: str) -> None:
    """opreg-testing finds nothing wrong with a correct op of any supported type."""
    op = register(case, how, ns)
    report = check_op(op, case.samples, options={"compile": {"backend": "aot_eager"}})
    failed = {r.check: r.reason for r in report.results if r.failed}
    assert not failed
    assert report["vmap"].passed and report["autograd"].passed


# -- what vmap_fn receives ----------------------------------------------------------------------


def test_what_vmap_fn_receives(ns: str) -> None:
    """An optional tensor given None arrives as None, an unbatched tensor expanded to the batch,
    an int list as it was given, each element of a Tensor?[] batched at dim 0 (or None), a
    keyword-only tensor batched too; nested levels fold into one leading dim."""
    seen: list[tuple[Any, ...]] = []

    def shapes(v: Any) -> Any:
        if isinstance(v, Tensor):
            return tuple(v.shape)
        if isinstance(v, list):
            return [shapes(e) for e in v]
        return v

    def f(
        x: Tensor, w: Tensor | None, dims: list[int], terms: list[Tensor | None], *, b: Tensor
    ) -> Tensor:
        out = x.sum(dims) + b.sum()
        out = out if w is None else out * w.sum()
        return out + sum(t.sum() for t in terms if t is not None)

    def f_batched(
        x: Tensor, w: Tensor | None, dims: list[int], terms: list[Tensor | None], *, b: Tensor
    ) -> Tensor:
        seen.append((shapes(x), shapes(w), dims, shapes(terms), shapes(b)))
        out = x.sum([d + 1 for d in dims]) + b.flatten(1).sum(1)[:, None]
        out = out if w is None else out * w.flatten(1).sum(1)[:, None]
        for t in terms:
            if t is not None:
                out = out + t.flatten(1).sum(1)[:, None]
        return out

    op = register_vmap_op(
        f, fake_fn=f, vmap_fn=f_batched, fake_vmap_fn=f_batched, name=f"{ns}::receives"
    )
    x, t, b = r(4, 2, 3), r(5), r(2)
    args = (x, None, [1], [None, t])
    dims = (0, None, None, None)
    out = torch.vmap(lambda *a: op(*a, b=b), in_dims=dims)(*args)
    assert seen[-1] == ((4, 2, 3), None, [1], [None, (4, 5)], (4, 2))
    torch.testing.assert_close(out, torch.vmap(lambda *a: f(*a, b=b), in_dims=dims)(*args))
    X, W = r(3, 4, 2, 3), r(3, 4, 6)
    out = torch.vmap(torch.vmap(lambda x, w: op(x, w, [0], [t], b=b)))(X, W)
    assert seen[-1] == ((12, 2, 3), (12, 6), [0], [(12, 5)], (12, 2))
    torch.testing.assert_close(
        out, torch.vmap(torch.vmap(lambda x, w: f(x, w, [0], [t], b=b)))(X, W)
    )


# -- refused types ------------------------------------------------------------------------------

REFUSED_SCHEMAS = [
    ("(Tensor x, Tensor[]? xs=None) -> Tensor", "argument 'xs' has type Tensor[]?"),
    ("(Tensor x, Generator? g=None) -> Tensor", "argument 'g' is a torch.Generator"),
    ("(Tensor x, Any a) -> Tensor", "argument 'a' has type Any"),
    ("(Tensor x, Storage s) -> Tensor", "argument 's' has type Storage"),
    ("(Tensor x, Stream s) -> Tensor", "argument 's' has type Stream"),
    ("(Tensor x, QScheme q) -> Tensor", "argument 'q' has type QScheme"),
    ("(Tensor x, Tensor[][] xs) -> Tensor", "argument 'xs' has type Tensor[][]"),
    ("(Tensor(a) x) -> Tensor", "argument 'x' has the alias annotation Tensor(a)"),
    ("(Tensor(a) x) -> Tensor(a)", "never an input or a view of one"),
    ("(Tensor x) -> Tensor(a)", "output 0 has an alias annotation"),
    ("(Tensor x) -> Tensor?", "output 0 has type Tensor?"),
    ("(Tensor x) -> Tensor?[]", "output 0 has type Tensor?[]"),
    ("(Tensor x) -> (Tensor, int[])", "output 1 has type int[]"),
    ("(Tensor x) -> ScalarType", "output 0 has type ScalarType"),
    ("(Tensor x, ...) -> Tensor", "has '...'"),
    ("(Tensor x, Dimname d) -> Tensor", "argument 'd' has type Dimname"),
    ("(Tensor x, Dimname[] ds) -> Tensor", "argument 'ds' has type Dimname"),
]


@pytest.mark.parametrize(
    ("schema", "message"), REFUSED_SCHEMAS, ids=[m for _, m in REFUSED_SCHEMAS]
)
def test_refused_schema_types(ns: str, schema: str, message: str) -> None:
    """A type opreg cannot support is refused at registration, naming the op and the argument
    (or output); nothing is left registered (the name is free for a correct op)."""
    name = f"{ns}::refused"
    with pytest.raises(ValueError, match=rf"^opreg: {name}: .*{re.escape(message)}"):
        register_vmap_op(lambda *a: a[0] * 2, fake_fn=lambda *a: a[0] * 2, schema=schema, name=name)
    op = register_vmap_op(opt_tensor, fake_fn=opt_tensor, name=name)
    torch.testing.assert_close(op(torch.ones(2)), torch.full((2,), 2.0))


def opt_list_annotation(x: Tensor, xs: list[Tensor] | None = None) -> Tensor:
    return x * 2


def opt_sequence_annotation(x: Tensor, xs: Optional[Sequence[Tensor]] = None) -> Tensor:  # noqa: UP045
    return x * 2


@pytest.mark.parametrize("fn", [opt_list_annotation, opt_sequence_annotation])
def test_an_optional_list_of_tensors_is_refused_alike_on_every_torch(
    ns: str, fn: Callable[..., Any]
) -> None:
    """``list[Tensor] | None`` (``Tensor[]?``): torch 2.15's infer_schema accepts it, earlier
    ones refuse it; opreg refuses it on each with the same message, naming the argument and
    the fix, as it refuses the schema type. (This module's annotations are strings, as
    infer_schema evaluates them.)"""
    name = f"{ns}::opt_list"
    expected = (
        rf"^opreg: {name}: argument 'xs' has type Tensor\[\]\? \(list\[Tensor\] \| None\), "
        r"which opreg does not support: .*take list\[Tensor\] \(Tensor\[\]\) and pass an "
        r"empty list for none, or list\[Tensor \| None\] \(Tensor\?\[\]\)$"
    )
    with pytest.raises(ValueError, match=expected):
        register_vmap_op(fn, fake_fn=fn, name=name)
    with pytest.raises(ValueError, match=expected):
        register_vmap_op(
            fn, fake_fn=fn, name=name, schema="(Tensor x, Tensor[]? xs=None) -> Tensor"
        )
    assert name not in {op.qualname for op in registered_ops()}  # nothing left registered


def test_a_callable_infer_schema_cannot_read_is_opregs_error(ns: str) -> None:
    """torch's infer_schema fails with AttributeError on a ``functools.partial`` (it reads the
    function's module): opreg's one-line error, naming the op, not torch's crash."""
    fn = functools.partial(lambda x, scale: x * scale, scale=2.0)
    name = f"{ns}::partial"
    with pytest.raises(ValueError) as info:
        register_vmap_op(fn, fake_fn=torch.empty_like, name=name)
    message = str(info.value)
    assert message.startswith(f"opreg: {name}: cannot build a schema from the annotations of ")
    assert "infer_schema failed on the function itself (AttributeError: " in message
    assert message.endswith("or pass schema=...)") and "\n" not in message
    assert isinstance(info.value.__cause__, AttributeError)


def optional_count(x: Tensor, n: Optional[int] = None) -> Tensor:  # noqa: UP045
    return x * 2


def test_a_crash_of_infer_schema_names_the_argument(
    ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch 2.9's infer_schema raises AttributeError on some union annotations (reproduced
    here on one annotation): opreg's one-line error names the op and the argument."""
    real = torch.library.infer_schema

    def crashes_on_optional_int(fn: Callable[..., Any], *, mutates_args: Any) -> str:
        for param in inspect.signature(fn).parameters.values():
            if param.annotation in (Optional[int], "Optional[int]"):  # noqa: UP045
                raise AttributeError("'_UnionGenericAlias' object has no attribute '__name__'")
        return real(fn, mutates_args=mutates_args)

    monkeypatch.setattr(torch.library, "infer_schema", crashes_on_optional_int)
    name = f"{ns}::optional_count"
    with pytest.raises(ValueError) as info:
        register_vmap_op(optional_count, fake_fn=optional_count, name=name)
    message = str(info.value)
    assert message.startswith(f"opreg: {name}: cannot build a schema from the annotations of ")
    assert "infer_schema failed on argument 'n' (AttributeError: " in message, message
    assert "\n" not in message
    monkeypatch.setattr(torch.library, "infer_schema", real)
    op = register_vmap_op(optional_count, fake_fn=optional_count, name=name)
    torch.testing.assert_close(op(torch.ones(2)), torch.full((2,), 2.0))


def generator_annotation(x: Tensor, generator: torch.Generator | None = None) -> Tensor:
    return x * 2


@pytest.mark.parametrize("fn", [generator_annotation])
def test_refused_annotations(ns: str, fn: Callable[..., Any]) -> None:
    """Annotations that opreg refuses before infer_schema reads them, in one line naming the
    op, the argument and the fix (more in test_registration_messages.py)."""
    name = f"{ns}::refused"
    with pytest.raises(ValueError, match=rf"^opreg: {name}: argument 'generator' .*int seed"):
        register_vmap_op(fn, fake_fn=fn, name=name)


def test_supported_plain_types_from_a_schema(ns: str) -> None:
    """Plain values that only an explicit schema can declare (complex, Layout, MemoryFormat,
    fixed-size and plain lists, optional str) pass through eager, vmap and compile unchanged."""
    seen: list[tuple[Any, ...]] = []

    def f(
        x: Tensor, c: complex, lay: Any, mf: Any, size: list[int], names: list[str], s: Any = None
    ):
        seen.append((c, lay, mf, size, names, s))
        return x * c.real * size[0] * len(names)

    schema = (
        "(Tensor x, complex c, Layout lay, MemoryFormat mf, int[2] size, str[] names, "
        "str? s=None) -> Tensor"
    )
    op = register_vmap_op(
        f, fake_fn=f, vmap_fn=f, fake_vmap_fn=f, schema=schema, name=f"{ns}::plain"
    )
    args = (r(3), 2 + 1j, torch.strided, torch.contiguous_format, [2, 3], ["a", "b"], "s")
    expected = f(*args)
    torch.testing.assert_close(op(*args), expected)
    assert seen[-1] == args[1:]
    X = r(4, 3)
    torch.testing.assert_close(torch.vmap(op, in_dims=(0,) + (None,) * 6)(X, *args[1:]), X * 8)
    assert seen[-1] == args[1:]
    torch._dynamo.reset()
    compiled = torch.compile(op, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(*args), expected)


# -- plain-value outputs under vmap without vmap_fn -----------------------------------------------


def test_plain_output_under_vmap_is_the_same_for_every_entry(ns: str) -> None:
    """Without vmap_fn, an op returning a plain value runs per sample under vmap (PyTorch's
    fallback cannot): the value must be the same for every entry, or the error says so."""

    def size_and_double(x: Tensor) -> tuple[Tensor, int]:
        return x * 2, x.shape[0]

    op = register_vmap_op(size_and_double, fake_fn=size_and_double, name=f"{ns}::same")
    out, n = torch.vmap(op, out_dims=(0, None))(r(4, 3))
    assert n == 3 and out.shape == (4, 3)

    def count_positive(x: Tensor) -> tuple[Tensor, int]:  # a mutant: differs per entry
        return x * 2, int((x > 0).sum())

    bad = register_vmap_op(count_positive, fake_fn=lambda x: (x * 2, 0), name=f"{ns}::differs")
    X = torch.tensor([[1.0, -1.0], [1.0, 1.0]])
    with pytest.raises(RuntimeError, match=rf"opreg: {ns}::differs: .*non-tensor output"):
        torch.vmap(bad, out_dims=(0, None))(X)
