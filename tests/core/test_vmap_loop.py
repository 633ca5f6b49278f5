"""An op without ``vmap_fn`` under vmap: opreg's per-sample loop (``BatchingRules.loop_rule``).

It computes what PyTorch's per-sample fallback computes, at any depth and with autograd, and
shows no "performance drop" warning (torch 2.15's fallback warns on every call; 2.13's logs it
to stderr). An op that writes to an argument loops too, writing each entry's slice in place
(tests/core/test_vmap_mutating.py).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch.func import grad, jacrev, vmap

from opreg_core import first_call_fake_check_paused, register_vmap_op

DROP = "performance drop"


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(*inputs)


def _backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, w = ctx.saved_tensors
    return g * w * torch.cos(x * w), g * x * torch.cos(x * w)


@pytest.fixture
def sin_mul(ns: str) -> Any:
    """``sin(x * w)`` with a backward and no ``vmap_fn``."""

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.sin(x * w)

    return register_vmap_op(
        fn,
        name=f"{ns}::sin_mul",
        fake_fn=lambda x, w: torch.empty_like(x),
        setup_context=_setup,
        backward=_backward,
    )


def test_an_op_without_vmap_fn_gets_opregs_loop(sin_mul: Any) -> None:
    assert sin_mul.batched_overload is None
    assert ("FuncTorchBatched", "per-sample vmap loop") in {
        (r.dispatch_key, r.what) for r in sin_mul.registrations
    }


def test_vmap_without_vmap_fn_warns_of_nothing_and_is_right(
    sin_mul: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """vmap at one and two levels, ``grad(vmap)``, ``vmap(grad)`` and ``jacrev(vmap)``, with
    every warning an error and nothing about a performance drop on stderr (where torch 2.13
    logs its fallback's warning)."""
    x = torch.randn(3, 4, 5, dtype=torch.float64)
    w = torch.randn(5, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        one = vmap(sin_mul, in_dims=(0, None))(x[0], w)
        two = vmap(vmap(sin_mul, in_dims=(0, None)), in_dims=(0, None))(x, w)
        g_of_vmap = grad(lambda x: vmap(sin_mul, in_dims=(0, None))(x, w).sum())(x[0])
        vmap_of_g = vmap(grad(lambda x: sin_mul(x, w).sum()))(x[0])
        jac = jacrev(lambda w: vmap(sin_mul, in_dims=(0, None))(x[0], w))(w)
    torch.testing.assert_close(one, torch.sin(x[0] * w))
    torch.testing.assert_close(two, torch.sin(x * w))
    torch.testing.assert_close(g_of_vmap, w * torch.cos(x[0] * w))
    torch.testing.assert_close(vmap_of_g, w * torch.cos(x[0] * w))
    expected = torch.func.jacrev(lambda w: torch.sin(x[0] * w))(w)
    torch.testing.assert_close(jac, expected)
    captured = capfd.readouterr()
    assert DROP not in captured.err and DROP not in captured.out


def test_vmap_without_vmap_fn_backward_through_the_loop(sin_mul: Any) -> None:
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, dtype=torch.float64, requires_grad=True)
    out = vmap(sin_mul, in_dims=(0, None))(x, w)
    gx, gw = torch.autograd.grad(out.sum(), (x, w))
    torch.testing.assert_close(gx, w * torch.cos(x * w))
    torch.testing.assert_close(gw, (x * torch.cos(x * w)).sum(0))


@pytest.mark.parametrize("randomness", ["error", "same", "different"])
def test_random_ops_draw_one_entry_after_another(ns: str, randomness: str) -> None:
    """As in PyTorch's fallback: each entry's call runs below the level, drawing from the
    global generator in turn, whatever ``randomness`` says (the op's own draws are not
    vmap's random ops)."""

    def noisy(x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand(x.shape)

    op = register_vmap_op(noisy, name=f"{ns}::noisy", fake_fn=torch.empty_like)
    x = torch.zeros(4, 3)
    torch.manual_seed(7)
    out = vmap(op, randomness=randomness)(x)
    torch.manual_seed(7)
    expected = torch.stack([noisy(row) for row in x])
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_a_list_output_and_a_plain_output(ns: str) -> None:
    """What PyTorch's fallback cannot stack: a list of tensors, and a plain value that is the
    same for every entry."""

    def parts(x: torch.Tensor) -> list[torch.Tensor]:
        return [x * 2, x + 1]

    op = register_vmap_op(parts, name=f"{ns}::parts", fake_fn=lambda x: [x * 2, x + 1])
    x = torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a, b = vmap(op)(x)
    torch.testing.assert_close(a, x * 2)
    torch.testing.assert_close(b, x + 1)

    def width(x: torch.Tensor) -> int:
        return x.shape[-1]

    size = register_vmap_op(width, name=f"{ns}::width", fake_fn=lambda x: x.shape[-1])
    assert vmap(lambda x: x * size(x))(x).shape == (3, 4)


def test_a_writing_op_without_vmap_fn_loops_in_place(ns: str) -> None:
    def add_into(out: torch.Tensor, y: torch.Tensor) -> None:
        out.add_(y)

    op = register_vmap_op(
        add_into, name=f"{ns}::add_into", fake_fn=lambda out, y: None, mutates_args=("out",)
    )
    assert "FuncTorchBatched" in {r.dispatch_key for r in op.registrations}
    out = torch.zeros(2, 3)
    vmap(op, out_dims=None)(out, torch.ones(2, 3))
    torch.testing.assert_close(out, torch.ones(2, 3))
    assert op.vmap_stats.loop == 1


def test_compiled_vmap_of_an_op_without_vmap_fn(sin_mul: Any) -> None:
    x = torch.randn(3, 5)
    w = torch.randn(5)
    torch._dynamo.reset()
    compiled = torch.compile(
        lambda x: vmap(sin_mul, in_dims=(0, None))(x, w), backend="aot_eager", fullgraph=True
    )
    torch.testing.assert_close(compiled(x), torch.sin(x * w))


def test_a_fake_that_lies_about_the_shape_fails_a_compiled_vmap(ns: str) -> None:
    """As with PyTorch's fallback, the loop's output takes the traced (fake) shape, so a fake
    that lies about it fails the compiled graph instead of passing unnoticed."""
    op = register_vmap_op(
        lambda x: x * 2,
        schema="(Tensor x) -> Tensor",
        name=f"{ns}::lying",
        fake_fn=lambda x: x.new_empty(x.shape[0]),
    )
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: vmap(op)(x), backend="aot_eager")
    with first_call_fake_check_paused():  # the loop's own behaviour, as opreg-testing sees it
        with pytest.raises(RuntimeError, match="invalid for input of size"):
            compiled(torch.randn(2, 3, 4))
        torch.testing.assert_close(vmap(op)(torch.ones(2, 3, 4)), torch.full((2, 3, 4), 2.0))
    # Outside, the kernel's first eager call compares the fake and names it first.
    with pytest.raises(RuntimeError, match="output 0 of the function on cpu has shape"):
        vmap(op)(torch.ones(2, 3, 4))
