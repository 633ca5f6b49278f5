"""The direct call of a Triton op (``opreg_core``'s ``_direct_call``): a call autograd records
with plain tensors on a Triton device type reaches the op's Triton kernel without the
dispatcher, with the dispatcher's results and gradients; tensors of another device type reach
the fallback; the rest goes through the dispatcher. On CPU through Triton's interpreter (the
plugin's ``opreg_triton_cpu``), on CUDA with compiled kernels."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from opreg_kernels import register_triton_op

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

DIRECT, DISPATCHER = "direct", "dispatcher"


@triton.jit  # type: ignore[untyped-decorator]
def _scale_kernel(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * alpha, mask=mask)


class Launcher:
    """The op's Triton launcher, counting its launches."""

    def __init__(self) -> None:
        self.launches = 0

    def __call__(self, x: torch.Tensor, alpha: float) -> torch.Tensor:
        self.launches += 1
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _scale_kernel[(triton.cdiv(n, 256),)](x, out, n, alpha, BLOCK=256)
        return out


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.alpha = inputs[1]


def _backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
    return g * ctx.alpha, None


@pytest.fixture
def scale(ns: str, triton_device: torch.device) -> tuple[Any, Launcher]:
    launcher = Launcher()

    def scale(x: torch.Tensor, alpha: float) -> torch.Tensor:
        return x * alpha

    op = register_triton_op(
        scale,
        name=f"{ns}::scale",
        fake_fn=lambda x, alpha: torch.empty_like(x),
        triton_fn=launcher,
        triton_device_types=triton_device.type,
        backward=_backward,
        setup_context=_setup,
    )
    return op, launcher


def test_plain_tensors_reach_the_triton_kernel_directly(
    route: Any, scale: tuple[Any, Launcher], triton_device: torch.device
) -> None:
    op, launcher = scale
    x = torch.randn(1000, device=triton_device, requires_grad=True)
    taken, out = route(op, x, 0.5)
    assert taken == DIRECT
    assert launcher.launches == 1
    expected = op.overload(x, 0.5)
    assert launcher.launches == 2
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    torch.testing.assert_close(out, x.detach() * 0.5)
    assert out.grad_fn.name() == expected.grad_fn.name()
    (grad,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(grad, torch.full_like(x, 0.5))
    with torch.no_grad():  # not recorded: the kernel alone, directly too
        taken, out = route(op, x, 0.5)
    assert taken == DIRECT and launcher.launches == 3
    torch.testing.assert_close(out, expected.detach(), rtol=0, atol=0)
    assert not out.requires_grad


def test_other_calls_keep_their_routes(
    route: Any, scale: tuple[Any, Launcher], triton_device: torch.device
) -> None:
    op, launcher = scale
    x = torch.randn(1000, device=triton_device, requires_grad=True)
    assert route(op, x, 2)[0] == DISPATCHER  # an int for a float: the dispatcher converts it
    assert route(op, x, alpha=0.5)[0] == DISPATCHER
    assert launcher.launches == 2
    taken, out = route(op, x.detach().to("meta").requires_grad_(), 0.5)  # the fake, no launch
    assert taken == DISPATCHER and out.device.type == "meta" and launcher.launches == 2
    if triton_device.type == "cuda":  # a CPU tensor: the fallback, directly
        taken, out = route(op, x.detach().cpu().requires_grad_(), 0.5)
        assert taken == DIRECT and launcher.launches == 2
        torch.testing.assert_close(out.detach(), x.detach().cpu() * 0.5)


def test_a_list_of_tensors_reaches_the_triton_kernel_directly(
    route: Any, dispatcher_entries: Any, ns: str, triton_device: torch.device
) -> None:
    """``Tensor[]``: each element's key set is checked as a tensor argument's is; the Triton
    kernel runs per element, recorded or not, with the dispatcher's values and gradients; a
    list mixing device types goes to the dispatcher."""
    launcher = Launcher()

    def scale_all(xs: list[torch.Tensor], alpha: float) -> torch.Tensor:
        return torch.stack([x * alpha for x in xs])

    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        return list((g * ctx.alpha).unbind(0)), None

    op = register_triton_op(
        scale_all,
        name=f"{ns}::scale_all",
        fake_fn=lambda xs, alpha: torch.stack([torch.empty_like(x) for x in xs]),
        triton_fn=lambda xs, alpha: torch.stack([launcher(x, alpha) for x in xs]),
        triton_device_types=triton_device.type,
        backward=backward,
        setup_context=_setup,
    )
    xs = [torch.randn(300, device=triton_device, requires_grad=True) for _ in range(2)]
    taken, out = route(op, xs, 0.5)
    assert taken == DIRECT and launcher.launches == 2
    expected = op.overload(xs, 0.5)
    assert launcher.launches == 4
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    grads = torch.autograd.grad(out.sum(), xs)
    torch.testing.assert_close(grads, torch.autograd.grad(expected.sum(), xs), rtol=0, atol=0)
    torch.testing.assert_close(grads[1], torch.full_like(xs[1], 0.5))
    with torch.no_grad():
        taken, out = route(op, xs, 0.5)
    assert taken == DIRECT and launcher.launches == 6 and not out.requires_grad
    if triton_device.type == "cuda":  # CUDA and CPU elements: the dispatcher's
        mixed = [xs[0], xs[1].detach().cpu()]
        outcomes = []
        for call in (op, op.overload):
            with dispatcher_entries(op) as count:
                try:
                    outcomes.append(("ok", call(mixed, 0.5).cpu()))
                except Exception as exc:  # (the dispatcher's error, on both routes)
                    outcomes.append((type(exc).__name__, str(exc)))
            if call is op:
                assert count == [1]
        assert outcomes[0][0] == outcomes[1][0]
        if outcomes[0][0] == "ok":
            torch.testing.assert_close(outcomes[0][1], outcomes[1][1], rtol=0, atol=0)
        else:
            assert outcomes[0] == outcomes[1]
