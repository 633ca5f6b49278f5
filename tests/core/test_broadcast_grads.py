"""Broadcast-shaped gradients: a backward may return, for an input the op broadcasts, a gradient
of the broadcast shape; it is summed to the input's shape as autograd does, per sample under
vmap (never over the batch), in every vmap/grad composition. An irreducible shape is an error
naming the op, the argument and both shapes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.func import grad, jacrev, vmap

from opreg_core import register_vmap_op

Grads = tuple[torch.Tensor, ...]


def _sin_mul(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The reference in plain PyTorch: ``a`` and ``x`` broadcast against each other."""
    return torch.sin(a * x)


def _align(t: torch.Tensor, ndim: int) -> torch.Tensor:
    """A batched tensor (batch at dim 0) with its per-sample dims right-aligned to ``ndim``."""
    return t.reshape(t.shape[0], *([1] * (ndim - t.dim())), *t.shape[1:])


def _sin_mul_batched(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    n = max(a.dim(), x.dim())
    return torch.sin(_align(a, n) * _align(x, n))


def _fake(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    shape = torch.broadcast_shapes(a.shape, x.shape)
    return torch.empty(shape, dtype=a.dtype, device=a.device)


def _fake_batched(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    n = max(a.dim(), x.dim())
    return _fake(_align(a, n), _align(x, n))


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(*inputs)


def _broadcast_backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Both gradients have the OUTPUT's shape, whatever the inputs' shapes."""
    a, x = ctx.saved_tensors
    c = torch.cos(a * x)
    return g * x * c, g * a * c


@pytest.fixture
def op(ns: str) -> Any:
    return register_vmap_op(
        _sin_mul,
        fake_fn=_fake,
        vmap_fn=_sin_mul_batched,
        fake_vmap_fn=_fake_batched,
        backward=_broadcast_backward,
        setup_context=_setup,
        name=f"{ns}::sin_mul",
    )


# (a's shape, x's shape): leading extra dims, a size-1 dim, both sides broadcast, a scalar.
SHAPES = {
    "leading": ((4,), (3, 4)),
    "size1": ((3, 1), (3, 4)),
    "both": ((3, 1), (4,)),
    "scalar": ((), (2, 3)),
}
# Batch sizes per vmap level. Products 3 and 4 equal a broadcast dim of "leading" (3) or of
# "size1"/"both" (4), where summing over the batch instead would go unnoticed by shape.
BATCHES = {
    1: [(3,), (4,), (5,)],
    2: [(1, 3), (2, 2), (2, 3)],
    3: [(1, 1, 3), (2, 2, 1), (2, 1, 3)],
}

Dims = tuple[int | None, int | None]  # in_dims of (a, x) at every vmap level
Composition = Callable[[Callable[..., Any], Dims, Any, Any, Any], Grads]


def _loss(f: Callable[..., Any]) -> Callable[..., torch.Tensor]:
    return lambda a, x, w: (f(a, x) * w).sum()


def _grad_vmap(f: Callable[..., Any], d: Dims, a: Any, x: Any, w: Any) -> Grads:
    mapped = vmap(f, in_dims=d)
    return grad(lambda a, x: (mapped(a, x) * w).sum(), argnums=(0, 1))(a, x)


def _vmap_grad(f: Callable[..., Any], d: Dims, a: Any, x: Any, w: Any) -> Grads:
    return vmap(grad(_loss(f), argnums=(0, 1)), in_dims=(*d, 0))(a, x, w)


def _vmap_vmap_grad(f: Callable[..., Any], d: Dims, a: Any, x: Any, w: Any) -> Grads:
    g = grad(_loss(f), argnums=(0, 1))
    return vmap(vmap(g, in_dims=(*d, 0)), in_dims=(*d, 0))(a, x, w)


def _grad_vmap_vmap(f: Callable[..., Any], d: Dims, a: Any, x: Any, w: Any) -> Grads:
    mapped = vmap(vmap(f, in_dims=d), in_dims=d)
    return grad(lambda a, x: (mapped(a, x) * w).sum(), argnums=(0, 1))(a, x)


def _vmap_grad_vmap(f: Callable[..., Any], d: Dims, a: Any, x: Any, w: Any) -> Grads:
    inner = vmap(f, in_dims=d)
    g = grad(lambda a, x, w: (inner(a, x) * w).sum(), argnums=(0, 1))
    return vmap(g, in_dims=(*d, 0))(a, x, w)


def _grad_vmap_vmap_vmap(f: Callable[..., Any], d: Dims, a: Any, x: Any, w: Any) -> Grads:
    mapped = f
    for _ in range(3):
        mapped = vmap(mapped, in_dims=d)
    return grad(lambda a, x: (mapped(a, x) * w).sum(), argnums=(0, 1))(a, x)


def _vmap_grad_vmap_vmap(f: Callable[..., Any], d: Dims, a: Any, x: Any, w: Any) -> Grads:
    inner = vmap(vmap(f, in_dims=d), in_dims=d)
    g = grad(lambda a, x, w: (inner(a, x) * w).sum(), argnums=(0, 1))
    return vmap(g, in_dims=(*d, 0))(a, x, w)


def _jacrev_vmap(f: Callable[..., Any], d: Dims, a: Any, x: Any, w: Any) -> Grads:
    return jacrev(vmap(f, in_dims=d), argnums=(0, 1))(a, x)


def _vmap_jacrev(f: Callable[..., Any], d: Dims, a: Any, x: Any, w: Any) -> Grads:
    return vmap(jacrev(f, argnums=(0, 1)), in_dims=d)(a, x)


def _backward_of_vmap(f: Callable[..., Any], d: Dims, a: Any, x: Any, w: Any) -> Grads:
    a, x = (t.detach().clone().requires_grad_() for t in (a, x))
    (vmap(f, in_dims=d)(a, x) * w).sum().backward()
    return a.grad, x.grad


# name -> (composition, number of vmap levels)
COMPOSITIONS: dict[str, tuple[Composition, int]] = {
    "grad(vmap)": (_grad_vmap, 1),
    "vmap(grad)": (_vmap_grad, 1),
    "jacrev(vmap)": (_jacrev_vmap, 1),
    "vmap(jacrev)": (_vmap_jacrev, 1),
    "backward(vmap)": (_backward_of_vmap, 1),
    "vmap(vmap(grad))": (_vmap_vmap_grad, 2),
    "grad(vmap(vmap))": (_grad_vmap_vmap, 2),
    "vmap(grad(vmap))": (_vmap_grad_vmap, 2),
    "grad(vmap(vmap(vmap)))": (_grad_vmap_vmap_vmap, 3),
    "vmap(grad(vmap(vmap)))": (_vmap_grad_vmap_vmap, 3),
}


def _inputs(
    shapes: tuple[tuple[int, ...], tuple[int, ...]], batches: tuple[int, ...], d: Dims
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``a`` and ``x``, each batched at every level (in_dims 0) or shared (None), and a loss
    weight ``w`` of the batched output's shape (so every entry counts)."""
    (a_shape, x_shape), (ad, xd) = shapes, d
    out_shape = torch.broadcast_shapes(a_shape, x_shape)
    a = torch.randn((*(batches if ad == 0 else ()), *a_shape), dtype=torch.float64)
    x = torch.randn((*(batches if xd == 0 else ()), *x_shape), dtype=torch.float64)
    w = torch.randn((*batches, *out_shape), dtype=torch.float64)
    return a, x, w


@pytest.mark.parametrize(
    "dims", [(None, 0), (0, 0), (0, None)], ids=["a_shared", "both_batched", "x_shared"]
)
@pytest.mark.parametrize("shape_case", list(SHAPES))
@pytest.mark.parametrize("composition", list(COMPOSITIONS))
def test_composition_matches_plain_pytorch(
    op: Any, composition: str, shape_case: str, dims: Dims
) -> None:
    fn, levels = COMPOSITIONS[composition]
    for batches in BATCHES[levels]:
        a, x, w = _inputs(SHAPES[shape_case], batches, dims)
        expected = fn(_sin_mul, dims, a, x, w)
        got = fn(op, dims, a, x, w)
        torch.testing.assert_close(got, expected, msg=lambda m, b=batches: f"batches {b}: {m}")


@pytest.mark.parametrize("dims", [(None, 0), (0, 0)], ids=["a_shared", "both_batched"])
@pytest.mark.parametrize("shape_case", list(SHAPES))
@pytest.mark.parametrize("composition", [c for c, (_, n) in COMPOSITIONS.items() if n > 1])
def test_levels_past_max_vmap_level_match_plain_pytorch(
    ns: str, composition: str, shape_case: str, dims: Dims
) -> None:
    """Levels past the cap run a per-sample loop over the batched op: the same reduction."""
    capped = register_vmap_op(
        _sin_mul,
        fake_fn=_fake,
        vmap_fn=_sin_mul_batched,
        fake_vmap_fn=_fake_batched,
        max_vmap_level=1,
        backward=_broadcast_backward,
        setup_context=_setup,
        name=f"{ns}::sin_mul_capped",
    )
    fn, levels = COMPOSITIONS[composition]
    for batches in BATCHES[levels]:
        a, x, w = _inputs(SHAPES[shape_case], batches, dims)
        expected = fn(_sin_mul, dims, a, x, w)
        got = fn(capped, dims, a, x, w)
        torch.testing.assert_close(got, expected, msg=lambda m, b=batches: f"batches {b}: {m}")
    assert capped.vmap_stats.loop > 0


@pytest.mark.parametrize("shape_case", list(SHAPES))
def test_unbatched_paths_reduce_as_autograd(op: Any, shape_case: str) -> None:
    a_shape, x_shape = SHAPES[shape_case]
    a = torch.randn(a_shape, dtype=torch.float32)
    x = torch.randn(x_shape, dtype=torch.float32)
    w = torch.randn(torch.broadcast_shapes(a_shape, x_shape), dtype=torch.float32)
    for f in (op, _sin_mul):
        assert grad(_loss(f), argnums=(0, 1))(a, x, w)[0].shape == a.shape
    expected = grad(_loss(_sin_mul), argnums=(0, 1))(a, x, w)
    torch.testing.assert_close(grad(_loss(op), argnums=(0, 1))(a, x, w), expected)  # dtype too
    torch.testing.assert_close(jacrev(op, argnums=(0, 1))(a, x), jacrev(_sin_mul, (0, 1))(a, x))
    a2, x2 = (t.clone().requires_grad_() for t in (a, x))
    (op(a2, x2) * w).sum().backward()
    torch.testing.assert_close((a2.grad, x2.grad), expected)


@pytest.mark.parametrize("batch", [3, 5])
def test_vmap_backward_sums_per_sample_not_over_the_batch(op: Any, batch: int) -> None:
    """The original report: batch 3, equal to the broadcast dim 3, gave wrong numbers silently;
    batch 5 a shape error."""
    a = torch.randn(batch, 4, dtype=torch.float64)
    x = torch.randn(batch, 3, 4, dtype=torch.float64)
    w = torch.randn(batch, 3, 4, dtype=torch.float64)
    got = grad(lambda a: (vmap(op)(a, x) * w).sum())(a)
    expected = grad(lambda a: (vmap(_sin_mul)(a, x) * w).sum())(a)
    torch.testing.assert_close(got, expected)


# -- non-tensor inputs, None gradients, lists of tensors -----------------------------------------


def _scaled(a: torch.Tensor, x: torch.Tensor, s: float) -> torch.Tensor:
    return torch.sin(a * x) * s


def _scaled_batched(a: torch.Tensor, x: torch.Tensor, s: float) -> torch.Tensor:
    return _sin_mul_batched(a, x) * s


def _scaled_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    a, x, s = inputs
    ctx.save_for_backward(a, x)
    ctx.s = s


def _scaled_backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, None, None]:
    """A gradient of the output's shape for ``a``, None for ``x`` and the float."""
    a, x = ctx.saved_tensors
    return g * ctx.s * x * torch.cos(a * x), None, None


@pytest.mark.parametrize("ad", [None, 0], ids=["a_shared", "a_batched"])
def test_non_tensor_input_and_none_gradients(ns: str, ad: int | None) -> None:
    op = register_vmap_op(
        _scaled,
        fake_fn=lambda a, x, s: _fake(a, x),
        vmap_fn=_scaled_batched,
        fake_vmap_fn=lambda a, x, s: _fake_batched(a, x),
        backward=_scaled_backward,
        setup_context=_scaled_setup,
        name=f"{ns}::scaled",
    )
    x = torch.randn(3, 3, 4, dtype=torch.float64)
    a = torch.randn((4,) if ad is None else (3, 4), dtype=torch.float64)
    expected = grad(lambda a: vmap(_scaled, in_dims=(ad, 0, None))(a, x, 1.5).sum())(a)
    got = grad(lambda a: vmap(op, in_dims=(ad, 0, None))(a, x, 1.5).sum())(a)
    torch.testing.assert_close(got, expected)
    got = vmap(grad(lambda a, x: op(a, x, 1.5).sum()), in_dims=(ad, 0))(a, x)
    torch.testing.assert_close(
        got, vmap(grad(lambda a, x: _scaled(a, x, 1.5).sum()), in_dims=(ad, 0))(a, x)
    )
    # x needs a gradient but backward gives None: autograd's rule, no gradient flows to it.
    x1 = x[0].clone().requires_grad_()
    a1 = torch.randn(4, dtype=torch.float64, requires_grad=True)
    op(a1, x1, 2.0).sum().backward()
    assert x1.grad is None
    torch.testing.assert_close(a1.grad, grad(lambda a: _scaled(a, x[0], 2.0).sum())(a1.detach()))


def _list_mul(xs: list[torch.Tensor], y: torch.Tensor) -> torch.Tensor:
    return xs[0] * y + xs[1] * y


def _list_mul_batched(xs: list[torch.Tensor], y: torch.Tensor) -> torch.Tensor:
    n = max(y.dim(), *(t.dim() for t in xs))
    return _align(xs[0], n) * _align(y, n) + _align(xs[1], n) * _align(y, n)


def _list_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    xs, y = inputs
    ctx.save_for_backward(*xs, y)


def _list_backward(ctx: Any, g: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    x0, x1, y = ctx.saved_tensors
    return [g * y, g * y], g * (x0 + x1)  # every gradient has the output's shape


@pytest.mark.parametrize("batch", [3, 4, 5])
def test_list_of_tensors_input(ns: str, batch: int) -> None:
    op = register_vmap_op(
        _list_mul,
        fake_fn=lambda xs, y: _fake(xs[0] + xs[1], y),
        vmap_fn=_list_mul_batched,
        fake_vmap_fn=lambda xs, y: _fake_batched(xs[0], y),
        backward=_list_backward,
        setup_context=_list_setup,
        name=f"{ns}::list_mul",
    )
    xs = [torch.randn(batch, 4).double(), torch.randn(batch, 3, 1).double()]
    y = torch.randn(batch, 3, 4, dtype=torch.float64)
    w = torch.randn(batch, 3, 4, dtype=torch.float64)
    expected = grad(lambda xs, y: (vmap(_list_mul)(xs, y) * w).sum(), (0, 1))(xs, y)
    got = grad(lambda xs, y: (vmap(op)(xs, y) * w).sum(), (0, 1))(xs, y)
    torch.testing.assert_close(got, expected)
    got = vmap(grad(lambda xs, y, w: (op(xs, y) * w).sum(), (0, 1)))(xs, y, w)
    torch.testing.assert_close(got, expected)
    leaves = [t.clone().requires_grad_() for t in (*xs, y)]
    (vmap(op)(leaves[:2], leaves[2]) * w).sum().backward()
    torch.testing.assert_close(tuple(t.grad for t in leaves), (*expected[0], expected[1]))


# -- irreducible gradients ----------------------------------------------------------------


def _bad_backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A gradient of shape (5,) for ``a`` of shape (4,): no broadcast relates them."""
    a, x = ctx.saved_tensors
    return g.new_ones(5), g * a * torch.cos(a * x)


@pytest.fixture
def bad_op(ns: str) -> Any:
    return register_vmap_op(
        _sin_mul,
        fake_fn=_fake,
        vmap_fn=_sin_mul_batched,
        fake_vmap_fn=_fake_batched,
        backward=_bad_backward,
        setup_context=_setup,
        name=f"{ns}::bad_grad",
    )


def _expect_shape_error(bad_op: Any, run: Callable[[], Any]) -> None:
    with pytest.raises(RuntimeError) as info:
        run()
    message = str(info.value)
    assert bad_op.qualname in message
    assert "argument 'a'" in message
    assert "shape (5,)" in message and "shape (4,)" in message


def test_irreducible_gradient_is_an_error_naming_op_argument_and_shapes(bad_op: Any) -> None:
    a = torch.randn(4, requires_grad=True)
    x = torch.randn(3, 4)
    _expect_shape_error(bad_op, lambda: bad_op(a, x).sum().backward())
    _expect_shape_error(bad_op, lambda: grad(lambda a: bad_op(a, x).sum())(a.detach()))


@pytest.mark.parametrize("ad", [None, 0], ids=["a_shared", "a_batched"])
def test_irreducible_gradient_under_vmap_is_the_same_error(bad_op: Any, ad: int | None) -> None:
    """Batched (the derived backward: shapes per sample) and under vmap(grad) alike."""
    a = torch.randn((4,) if ad is None else (5, 4))
    x = torch.randn(5, 3, 4)
    _expect_shape_error(
        bad_op, lambda: grad(lambda a: vmap(bad_op, in_dims=(ad, 0))(a, x).sum())(a)
    )
    _expect_shape_error(
        bad_op, lambda: vmap(grad(lambda a, x: bad_op(a, x).sum()), in_dims=(ad, 0))(a, x)
    )
    leaf = a.clone().requires_grad_()
    _expect_shape_error(bad_op, lambda: vmap(bad_op, in_dims=(ad, 0))(leaf, x).sum().backward())


def test_irreducible_gradient_of_a_list_element_names_the_element(ns: str) -> None:
    def backward(ctx: Any, g: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        x0, x1, y = ctx.saved_tensors
        return [g * y, g.new_ones(2, 2)], g * (x0 + x1)

    op = register_vmap_op(
        _list_mul,
        fake_fn=lambda xs, y: _fake(xs[0] + xs[1], y),
        vmap_fn=_list_mul_batched,
        fake_vmap_fn=lambda xs, y: _fake_batched(xs[0], y),
        backward=backward,
        setup_context=_list_setup,
        name=f"{ns}::bad_list",
    )
    xs = [torch.randn(4), torch.randn(3, 1, requires_grad=True)]
    y = torch.randn(3, 4)
    for run in (
        lambda: op(xs, y).sum().backward(),
        lambda: vmap(op, in_dims=([None, None], 0))(xs, y.expand(2, 3, 4)).sum().backward(),
    ):
        with pytest.raises(RuntimeError, match=r"argument 'xs\[1\]' of shape \(3, 1\)") as info:
            run()
        assert op.qualname in str(info.value) and "shape (2, 2)" in str(info.value)


def test_irreducible_gradient_of_an_input_without_grad_is_ignored_as_by_autograd(
    bad_op: Any,
) -> None:
    """Autograd drops gradients of inputs that need none, whatever their shape; so do we."""
    a = torch.randn(4)
    x = torch.randn(5, 3, 4, requires_grad=True)
    expected = grad(lambda x: vmap(_sin_mul, in_dims=(None, 0))(a, x).sum())(x.detach())
    got = grad(lambda x: vmap(bad_op, in_dims=(None, 0))(a, x).sum())(x.detach())
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(grad(lambda x: bad_op(a, x).sum())(x[0].detach()), expected[0])
    vmap(bad_op, in_dims=(None, 0))(a, x).sum().backward()
    torch.testing.assert_close(x.grad, expected)


def test_compiled_backward_reduces_per_sample(op: Any) -> None:
    """Under torch.compile (aot_eager: the same traced backward Inductor would compile)."""
    a = torch.randn(3, 4, requires_grad=True)
    x = torch.randn(3, 3, 4)

    def loss(f: Callable[..., Any], a: torch.Tensor) -> torch.Tensor:
        return (vmap(f)(a, x) ** 2).sum() + (f(a[0], x[0]) ** 2).sum()

    torch.compile(lambda a: loss(op, a), backend="aot_eager", fullgraph=True)(a).backward()
    expected = torch.autograd.grad(loss(_sin_mul, a), a)[0]
    torch.testing.assert_close(a.grad, expected)
