"""An argument that vmap leaves unbatched (in_dims None) reaches the batched op expanded to the
batch (stride 0). Its derived backward and jvp replay the user's rules per sample with that
argument unbatched, as the sample it is: rules written for one sample that need a contiguous
input (``group_norm``'s backward) or one of the sample's rank (``channels_last``) work, and
every derivative (first and second order, per batch entry) matches plain PyTorch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.func import grad, hessian, jacfwd, jacrev, jvp, vjp, vmap

from opreg_core import register_vmap_op

Fn = Callable[..., torch.Tensor]
B = 3


def _rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64)


def _save_inputs(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(*inputs)


def _rules(fn: Fn) -> dict[str, Any]:
    """setup_context, backward and jvp of ``fn`` as authors write them: torch.func.vjp / jvp."""

    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(vjp(fn, *ctx.saved_tensors)[1](g))

    def jvp_rule(ctx: Any, *tangents: torch.Tensor | None) -> torch.Tensor:
        primals = ctx.saved_tensors
        filled = tuple(
            torch.zeros_like(p) if t is None else t for p, t in zip(primals, tangents, strict=True)
        )
        tangent: torch.Tensor = jvp(fn, primals, filled)[1]
        return tangent

    return {"setup_context": _save_inputs, "backward": backward, "jvp": jvp_rule}


# -- group_norm: its backward needs a contiguous input -------------------------------------------


def _group_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.group_norm(x, 2, w, b)


def _group_norm_batched(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # group_norm under vmap needs a contiguous input: an unbatched x arrives expanded.
    return vmap(_group_norm)(x.contiguous(), w, b)


def _empty_like_first(x: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@pytest.fixture
def group_norm_op(ns: str) -> Any:
    return register_vmap_op(
        _group_norm,
        name=f"{ns}::group_norm",
        fake_fn=_empty_like_first,
        vmap_fn=_group_norm_batched,
        fake_vmap_fn=_empty_like_first,
        **_rules(_group_norm),
    )


#: x (one sample, N=1: expanded, its batch dim cannot fold into N contiguously) unbatched,
#: weight and bias batched.
X, W, BIAS = (1, 4, 3, 3), (B, 4), (B, 4)


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.pow(2).sum()


GROUP_NORM_CASES: dict[str, Callable[[Fn, tuple[torch.Tensor, ...]], Any]] = {
    "grad(vmap)": lambda fn, v: grad(
        lambda x, w, b: _loss(vmap(fn, in_dims=(None, 0, 0))(x, w, b)), argnums=(0, 1, 2)
    )(*v),
    "jacrev(vmap)": lambda fn, v: jacrev(lambda x: vmap(fn, in_dims=(None, 0, 0))(x, *v[1:]))(v[0]),
    "backward()": lambda fn, v: _backward_grads(fn, v),
    "grad(vmap(vmap))": lambda fn, v: grad(
        lambda x: _loss(
            vmap(vmap(fn, in_dims=(None, 0, 0)), in_dims=(None, 1, 1))(
                x, v[1].unsqueeze(1).expand(B, 2, 4), v[2].unsqueeze(1).expand(B, 2, 4)
            )
        )
    )(v[0]),
    "jvp(vmap)": lambda fn, v: jvp(
        lambda x, w: vmap(fn, in_dims=(None, 0, 0))(x, w, v[2]), v[:2], (v[0].cos(), v[1].cos())
    ),
    "jvp(vmap), x's tangent only": lambda fn, v: jvp(
        lambda x: vmap(fn, in_dims=(None, 0, 0))(x, *v[1:]), v[:1], (v[0].cos(),)
    ),
    "vmap(grad)": lambda fn, v: vmap(
        grad(lambda x, w, b: _loss(fn(x, w, b)), argnums=(0, 1)), in_dims=(None, 0, 0)
    )(*v),
}


def _backward_grads(fn: Fn, v: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    x, w = v[0].clone().requires_grad_(), v[1].clone().requires_grad_()
    torch.autograd.backward(_loss(vmap(fn, in_dims=(None, 0, 0))(x, w, v[2])))
    assert x.grad is not None and w.grad is not None
    return x.grad, w.grad


@pytest.mark.parametrize("case", GROUP_NORM_CASES.values(), ids=GROUP_NORM_CASES.keys())
def test_group_norm_with_an_unbatched_input(group_norm_op: Any, case: Callable[..., Any]) -> None:
    values = (_rand(*X), _rand(*W), _rand(*BIAS))
    torch.testing.assert_close(case(group_norm_op, values), case(_group_norm, values))


# -- channels_last: the rule needs its input at the sample's rank ---------------------------------


def _channels_last(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.to(memory_format=torch.channels_last) * w


def _channels_last_batched(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    # channels_last under torch.vmap raises (a rank-5 physical tensor): one sample at a time.
    return torch.stack([_channels_last(a, b) for a, b in zip(x, w, strict=True)])


CHANNELS_LAST_CASES: dict[str, Callable[[Fn, tuple[torch.Tensor, ...]], Any]] = {
    "grad(vmap)": lambda fn, v: grad(
        lambda x, w: _loss(vmap(fn, in_dims=(None, 0))(x, w)), argnums=(0, 1)
    )(*v),
    "jacrev(vmap)": lambda fn, v: jacrev(lambda x: vmap(fn, in_dims=(None, 0))(x, v[1]))(v[0]),
    "jvp(vmap)": lambda fn, v: jvp(vmap(fn, in_dims=(None, 0)), v, (v[0].cos(), v[1].cos())),
}


@pytest.mark.parametrize("case", CHANNELS_LAST_CASES.values(), ids=CHANNELS_LAST_CASES.keys())
def test_channels_last_with_an_unbatched_input(ns: str, case: Callable[..., Any]) -> None:
    op = register_vmap_op(
        _channels_last,
        name=f"{ns}::channels_last",
        fake_fn=_empty_like_first,
        vmap_fn=_channels_last_batched,
        fake_vmap_fn=_empty_like_first,
        **_rules(_channels_last),
    )
    values = (_rand(2, 4, 3, 3), _rand(B, 3))
    torch.testing.assert_close(case(op, values), case(_channels_last, values))


# -- every derivative stays exact -------------------------------------------------------------


def _scaled(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * y.sin().sum()


def _scaled_batched(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * y.sin().sum(1).reshape(-1, *([1] * (x.dim() - 1)))


def _scaled_backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = ctx.saved_tensors
    return g * y.sin().sum(), (g * x).sum() * y.cos()


def _scaled_jvp(ctx: Any, x_t: torch.Tensor | None, y_t: torch.Tensor | None) -> torch.Tensor:
    x, y = ctx.saved_tensors
    out = torch.zeros_like(x)
    if x_t is not None:
        out = out + x_t * y.sin().sum()
    if y_t is not None:
        out = out + x * (y.cos() * y_t).sum()
    return out


XB, Y = (B, 3, 2), (4,)


def _double_backward(fn: Fn, x: torch.Tensor, y: torch.Tensor, in_dims: Any) -> torch.Tensor:
    """d/dy of sum((d loss/dy)^3), through a backward that is itself differentiated."""
    (g,) = torch.autograd.grad(_loss(vmap(fn, in_dims=in_dims)(x, y)), y, create_graph=True)
    (gg,) = torch.autograd.grad(g.pow(3).sum(), y)
    return gg


EXACT_CASES: dict[str, Callable[[Fn, torch.Tensor, torch.Tensor], Any]] = {
    "hessian(vmap)": lambda fn, x, y: hessian(
        lambda a, b: _loss(vmap(fn, in_dims=(0, None))(a, b)), argnums=(0, 1)
    )(x, y),
    "jacfwd(jacfwd(vmap))": lambda fn, x, y: jacfwd(
        jacfwd(lambda b: _loss(vmap(fn, in_dims=(0, None))(x, b)))
    )(y),
    "jacrev(jacrev(vmap(vmap)))": lambda fn, x, y: jacrev(
        jacrev(
            lambda b: _loss(
                vmap(vmap(fn, in_dims=(0, None)), in_dims=(0, None))(x.expand(2, *x.shape), b)
            )
        )
    )(y),
    "create_graph": lambda fn, x, y: _double_backward(fn, x, y.clone().requires_grad_(), (0, None)),
    # y unbatched by the inner vmap only: batched, and replayed batched, at the outer one.
    "hessian(vmap(vmap)), inner level only": lambda fn, x, y: hessian(
        lambda b: _loss(vmap(vmap(fn, in_dims=(0, None)))(x.expand(2, *x.shape), b))
    )(torch.stack([y, y.cos()])),
    # a stride-0 tensor of the caller's, batched: each entry keeps its own second derivative
    "create_graph, a caller's stride-0 input": lambda fn, x, y: _double_backward(
        fn, x, y.expand(B, *y.shape).detach().requires_grad_(), 0
    ),
}


@pytest.mark.parametrize("case", EXACT_CASES.values(), ids=EXACT_CASES.keys())
def test_derivatives_through_an_unbatched_input_are_exact(
    ns: str, case: Callable[..., Any]
) -> None:
    op = register_vmap_op(
        _scaled,
        name=f"{ns}::scaled",
        fake_fn=_empty_like_first,
        vmap_fn=_scaled_batched,
        fake_vmap_fn=_empty_like_first,
        setup_context=_save_inputs,
        backward=_scaled_backward,
        jvp=_scaled_jvp,
    )
    x, y = _rand(*XB), _rand(*Y)
    torch.testing.assert_close(case(op, x, y), case(_scaled, x, y))
