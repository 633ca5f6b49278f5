"""Autograd: the user's backward under every composition; no backward is an error, never zeros."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.func import grad, jacrev, vjp, vmap

from opreg_core import register_vmap_op


def _mul_fake(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, y = inputs
    ctx.save_for_backward(x, y)


def _backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    x, y = ctx.saved_tensors
    gx = g * y.sin().sum() if ctx.needs_input_grad[0] else None
    gy = (g * x).sum() * y.cos() if ctx.needs_input_grad[1] else None
    return gx, gy


def _f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x * sum(sin(y)): a function whose two gradients differ in shape and value."""
    return x * y.sin().sum()


def _vf(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    total = y.sin().reshape(y.shape[0], -1).sum(1)
    return x * total.reshape(-1, *([1] * (x.dim() - 1)))


@pytest.fixture
def op(ns: str) -> Any:
    return register_vmap_op(
        _f,
        fake_fn=_mul_fake,
        vmap_fn=_vf,
        fake_vmap_fn=_mul_fake,
        backward=_backward,
        setup_context=_setup,
        name=f"{ns}::mul",
    )


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(3, 2, dtype=torch.float64), torch.randn(4, dtype=torch.float64)


def test_backward_and_autograd_grad(op: Any) -> None:
    x, y = (t.requires_grad_() for t in _inputs())
    op(x, y).pow(2).sum().backward()
    x2, y2 = (t.detach().clone().requires_grad_() for t in (x, y))
    _f(x2, y2).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(y.grad, y2.grad)
    gx, gy = torch.autograd.grad(op(x, y).sum(), (x, y))
    rx, ry = torch.autograd.grad(_f(x2, y2).sum(), (x2, y2))
    torch.testing.assert_close((gx, gy), (rx, ry))


def test_gradcheck_and_gradgradcheck_free_paths(op: Any) -> None:
    x, y = (t.requires_grad_() for t in _inputs())
    assert torch.autograd.gradcheck(op, (x, y))
    assert torch.autograd.gradcheck(lambda a, b: vmap(op, in_dims=(0, None))(a, b), (x, y))
    assert torch.autograd.gradcheck(
        lambda a, b: vmap(vmap(op, in_dims=(0, None)), in_dims=(1, None))(a, b), (x, y)
    )


def test_functorch_grad_jacrev_vjp(op: Any) -> None:
    x, y = _inputs()
    for argnums in (0, 1, (0, 1)):
        torch.testing.assert_close(
            grad(lambda a, b: op(a, b).sum(), argnums=argnums)(x, y),
            grad(lambda a, b: _f(a, b).sum(), argnums=argnums)(x, y),
        )
    torch.testing.assert_close(jacrev(op, argnums=1)(x, y), jacrev(_f, argnums=1)(x, y))
    out, pullback = vjp(op, x, y)
    torch.testing.assert_close(
        pullback(torch.ones_like(out)), vjp(_f, x, y)[1](torch.ones_like(out))
    )


def test_grad_of_vmap_and_vmap_of_grad(op: Any) -> None:
    X, y = torch.randn(5, 3, 2, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    expected = grad(lambda a, b: vmap(_f, in_dims=(0, None))(a, b).sum(), argnums=(0, 1))(X, y)
    got = grad(lambda a, b: vmap(op, in_dims=(0, None))(a, b).sum(), argnums=(0, 1))(X, y)
    torch.testing.assert_close(got, expected)
    per_sample = vmap(grad(lambda a, b: op(a, b).sum(), argnums=1), in_dims=(0, None))(X, y)
    torch.testing.assert_close(
        per_sample, vmap(grad(lambda a, b: _f(a, b).sum(), argnums=1), in_dims=(0, None))(X, y)
    )
    assert op.vmap_stats.fast >= 1


def test_batched_backward_is_derived_and_runs_under_vmap(op: Any) -> None:
    X = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    y = torch.randn(4, dtype=torch.float64, requires_grad=True)
    vmap(vmap(op, in_dims=(0, None)), in_dims=(0, None))(X, y).sum().backward()
    X2, y2 = X.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    vmap(vmap(_f, in_dims=(0, None)), in_dims=(0, None))(X2, y2).sum().backward()
    torch.testing.assert_close((X.grad, y.grad), (X2.grad, y2.grad))
    assert op.vmap_stats.nested == 1


def test_jacrev_of_vmap(op: Any) -> None:
    X, y = torch.randn(3, 2, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    torch.testing.assert_close(
        jacrev(lambda b: vmap(op, in_dims=(0, None))(X, b))(y),
        jacrev(lambda b: vmap(_f, in_dims=(0, None))(X, b))(y),
    )


def test_no_backward_is_an_error_everywhere(ns: str) -> None:
    op = register_vmap_op(
        _f, fake_fn=_mul_fake, vmap_fn=_vf, fake_vmap_fn=_mul_fake, name=f"{ns}::nobw"
    )
    x, y = _inputs()
    message = f"{ns}::nobw was registered without a backward"
    with pytest.raises(RuntimeError, match=message):
        op(x.requires_grad_(), y).sum().backward()
    with pytest.raises(RuntimeError, match=message):
        grad(lambda a: op(a, y).sum())(x.detach())
    with pytest.raises(RuntimeError, match=message):
        jacrev(lambda a: op(a, y))(x.detach())
    with pytest.raises(RuntimeError, match=message):
        grad(lambda a: vmap(op, in_dims=(0, None))(a, y).sum())(x.detach())
    with pytest.raises(RuntimeError, match=message):
        vmap(grad(lambda a: op(a, y).sum()))(x.detach())
    # forward without gradients is fine
    with torch.no_grad():
        torch.testing.assert_close(op(x, y), _f(x, y))


def test_non_differentiable_declares_no_gradient(ns: str) -> None:
    op = register_vmap_op(
        lambda x: x.argsort(-1).to(x.dtype),
        fake_fn=lambda x: torch.empty_like(x),
        vmap_fn=lambda x: x.argsort(-1).to(x.dtype),
        fake_vmap_fn=lambda x: torch.empty_like(x),
        differentiable=False,
        name=f"{ns}::ranks",
        schema="(Tensor x) -> Tensor",
    )
    x = torch.randn(3, 4, requires_grad=True)
    out = op(x)
    assert not out.requires_grad and out.grad_fn is None
    assert not vmap(op)(x).requires_grad
    assert {r.what for r in op.registrations if r.dispatch_key == "Autograd"} == {
        "non-differentiable"
    }
    # a gradient that flows around it still works
    (x * op(x)).sum().backward()
    torch.testing.assert_close(x.grad, op(x).detach())


@pytest.mark.parametrize("batched", [False, True], ids=["op", "vmap"])
def test_non_differentiable_fallback_leaks_no_gradient(ns: str, batched: bool) -> None:
    """differentiable=False on a fallback made of differentiable torch calls: no gradient
    reaches the inputs through the op, in eager autograd and under torch.func alike."""
    op = register_vmap_op(
        torch.sin,
        fake_fn=torch.empty_like,
        vmap_fn=torch.sin,
        fake_vmap_fn=torch.empty_like,
        differentiable=False,
        name=f"{ns}::sin_nograd",
        schema="(Tensor x) -> Tensor",
    )
    call = vmap(op) if batched else op
    x = torch.randn(2, 3, requires_grad=True)
    out = call(x)
    assert not out.requires_grad and out.grad_fn is None
    (x * call(x)).sum().backward()
    torch.testing.assert_close(x.grad, torch.sin(x.detach()))
    g = grad(lambda t: (t * call(t)).sum())(x.detach())
    torch.testing.assert_close(g, torch.sin(x.detach()))
    compiled = torch.compile(call, backend="aot_eager", fullgraph=True)
    assert not compiled(x).requires_grad
    # a kernel registered for the device is run below autograd too
    op.register_kernel("cpu", lambda t: torch.cos(t), batched=False)
    op.register_kernel("cpu", lambda t: torch.cos(t), batched=True)
    assert not call(x).requires_grad
    torch.testing.assert_close(call(x), torch.cos(x.detach()))


def test_backward_with_non_tensor_and_list_inputs(ns: str) -> None:
    def f(xs: list[torch.Tensor], k: float) -> torch.Tensor:
        return (xs[0] * xs[1]) * k

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        xs, k = inputs
        ctx.save_for_backward(*xs)
        ctx.k = k

    def backward(ctx: Any, g: torch.Tensor) -> tuple[list[torch.Tensor], None]:
        a, b = ctx.saved_tensors
        return [g * b * ctx.k, g * a * ctx.k], None

    fake = lambda xs, k: torch.empty_like(xs[0])  # noqa: E731
    op = register_vmap_op(
        f,
        fake_fn=fake,
        vmap_fn=f,
        fake_vmap_fn=fake,
        backward=backward,
        setup_context=setup,
        name=f"{ns}::prod",
    )
    a = torch.randn(3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: op([a, b], 2.0), (a, b))
    torch.testing.assert_close(
        grad(lambda a: op([a, b.detach()], 3.0).sum())(a.detach()), b.detach() * 3
    )
    A = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    B = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: vmap(lambda p, q: op([p, q], 2.0))(a, b), (A, B))
    assert op.vmap_stats.fast >= 1


@pytest.mark.parametrize("call", ["defaults", "keywords", "positional"])
def test_backward_with_keyword_only_and_default_arguments(ns: str, call: str) -> None:
    # Ops without list arguments record their inputs as they are (no flattening); keyword-only
    # arguments and dropped defaults must still reach forward, setup_context and backward.
    def f(
        x: torch.Tensor, w: torch.Tensor, scale: float = 2.0, *, shift: float = 0.5
    ) -> torch.Tensor:
        return x * w * scale + shift

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        x, w, scale, shift = inputs
        ctx.save_for_backward(x, w)
        ctx.scale = scale
        assert isinstance(shift, float)

    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        x, w = ctx.saved_tensors
        return g * w * ctx.scale, g * x * ctx.scale, None, None

    op = register_vmap_op(
        f, fake_fn=lambda x, w, scale=2.0, *, shift=0.5: torch.empty_like(x),
        backward=backward, setup_context=setup, name=f"{ns}::axpb",
    )  # fmt: skip
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, dtype=torch.float64, requires_grad=True)
    calls = {
        "defaults": (lambda x, w: op(x, w), 2.0, 0.5),
        "keywords": (lambda x, w: op(x, w, scale=3.0, shift=1.5), 3.0, 1.5),
        "positional": (lambda x, w: op(x, w, 4.0), 4.0, 0.5),
    }
    fn, scale, shift = calls[call]
    out = fn(x, w)
    torch.testing.assert_close(out, x * w * scale + shift)
    gx, gw = torch.autograd.grad(out.sum(), (x, w))
    torch.testing.assert_close(gx, w * scale)
    torch.testing.assert_close(gw, x * scale)
    assert torch.autograd.gradcheck(fn, (x, w))
    torch.testing.assert_close(grad(lambda x: fn(x, w.detach()).sum())(x.detach()), w * scale)


def test_forward_mode_ad_is_an_error_not_a_zero_tangent(op: Any) -> None:
    """Without this, torch.func.jvp and jacfwd silently returned zero tangents."""
    import torch.autograd.forward_ad as fwAD
    from torch.func import jacfwd, jvp

    x, y = _inputs()
    message = f"{op.qualname}: forward-mode AD"
    with pytest.raises(RuntimeError, match=message):
        jvp(lambda a: op(a, y), (x,), (torch.ones_like(x),))
    with pytest.raises(RuntimeError, match=message):
        jacfwd(lambda b: op(x, b))(y)
    with pytest.raises(RuntimeError, match=message):
        jvp(lambda a: vmap(op, in_dims=(0, None))(a, y), (x,), (torch.ones_like(x),))
    with pytest.raises(RuntimeError, match=message), fwAD.dual_level():
        op(fwAD.make_dual(x, torch.ones_like(x)), y)
    # reverse mode still works, and dual levels without dual inputs are fine
    with fwAD.dual_level():
        torch.testing.assert_close(op(x, y), _f(x, y))
