"""Property-based checks: vmap, nested vmap and grad of opreg ops agree with loops and with
autograd of the plain function, over shapes, dtypes and in_dims (profile: see conftest)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.func import grad, vmap

from opreg_core import register_vmap_op, unregister


def _softplus_scale(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.softplus(x) * w


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(*inputs)


def _backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, w = ctx.saved_tensors
    gx = g * torch.sigmoid(x) * w
    gw = g * torch.nn.functional.softplus(x)
    # w broadcasts against x: reduce its gradient back to w's shape
    while gw.dim() > w.dim():
        gw = gw.sum(0)
    return gx, gw


@pytest.fixture(scope="module")
def op() -> Iterator[Any]:
    fake = lambda x, w: torch.empty_like(x)  # noqa: E731

    def batched(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.softplus(x) * w.reshape(
            w.shape[0], *([1] * (x.dim() - w.dim())), *w.shape[1:]
        )

    made = register_vmap_op(
        _softplus_scale,
        fake_fn=fake,
        vmap_fn=batched,
        fake_vmap_fn=fake,
        backward=_backward,
        setup_context=_setup,
        name="opreg_core_test_props::softplus_scale",
    )
    yield made
    unregister(made.qualname)


_dtypes = st.sampled_from([torch.float32, torch.float64])


@given(
    feat=st.integers(1, 4),
    rows=st.integers(0, 3),
    batch=st.integers(1, 3),
    x_dim=st.sampled_from([0, 1, -1, None]),
    w_batched=st.booleans(),
    dtype=_dtypes,
)
def test_vmap_matches_loop(
    op: Any,
    feat: int,
    rows: int,
    batch: int,
    x_dim: int | None,
    w_batched: bool,
    dtype: torch.dtype,
) -> None:
    shape = [rows, feat] if rows else [feat]
    if x_dim is None and not w_batched:
        x_dim = 0
    x_shape = list(shape)
    if x_dim is not None:
        x_shape.insert(x_dim if x_dim >= 0 else len(x_shape) + 1 + x_dim, batch)
    x = torch.randn(x_shape, dtype=dtype)
    w = torch.randn([batch, feat] if w_batched else [feat], dtype=dtype)
    in_dims = (x_dim, 0 if w_batched else None)
    out = vmap(op, in_dims=in_dims)(x, w)
    ref = torch.stack(
        [
            _softplus_scale(x if x_dim is None else x.select(x_dim, i), w[i] if w_batched else w)
            for i in range(batch)
        ]
    )
    torch.testing.assert_close(out, ref)


@given(
    batch=st.integers(1, 3),
    inner=st.integers(1, 3),
    feat=st.integers(1, 4),
    dtype=_dtypes,
    arg=st.sampled_from([0, 1]),
)
def test_grad_of_nested_vmap_matches_plain_autograd(
    op: Any, batch: int, inner: int, feat: int, dtype: torch.dtype, arg: int
) -> None:
    x = torch.randn(batch, inner, feat, dtype=dtype)
    w = torch.randn(feat, dtype=dtype)

    def total(f: Any) -> Any:
        return lambda x, w: vmap(vmap(f, in_dims=(0, None)), in_dims=(0, None))(x, w).sum()

    got = grad(total(op), argnums=arg)(x, w)
    expected = grad(total(_softplus_scale), argnums=arg)(x, w)
    torch.testing.assert_close(got, expected)
    per_sample = vmap(grad(lambda a, b: op(a, b).sum(), argnums=arg), in_dims=(0, None))(x[:, 0], w)
    per_sample_ref = vmap(
        grad(lambda a, b: _softplus_scale(a, b).sum(), argnums=arg), in_dims=(0, None)
    )(x[:, 0], w)
    torch.testing.assert_close(per_sample, per_sample_ref)
