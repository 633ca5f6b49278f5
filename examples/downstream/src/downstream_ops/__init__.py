"""Three example operators registered with opreg, each with its own sample inputs.

Their names follow opreg's default rule (``<module>::<function>``), so they are
``downstream_ops::pairwise_sqdist``, ``downstream_ops::nearest_index`` and
``downstream_ops::soft_clamp``. ``soft_clamp`` has a Triton kernel
(:mod:`downstream_ops.triton_kernels`, imported on its first launch) next to its PyTorch
fallback: on CUDA it runs the kernel, on CPU the fallback; the checks run the kernel on CPU
too, on the device ``triton-cpu`` (Triton's interpreter).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from opreg_core import SampleInput, register_vmap_op
from opreg_kernels import register_triton_op

__all__ = ["nearest_index", "pairwise_sqdist", "soft_clamp"]


def _sqdist(x: Tensor, y: Tensor) -> Tensor:
    """``out[..., i, j] = |x[..., i, :] - y[..., j, :]|^2`` for any leading batch dims."""
    return (x.unsqueeze(-2) - y.unsqueeze(-3)).pow(2).sum(-1)


def _sqdist_fake(x: Tensor, y: Tensor) -> Tensor:
    return x.new_empty(x.shape[0], y.shape[0])


def _sqdist_fake_batched(x: Tensor, y: Tensor) -> Tensor:
    return x.new_empty(x.shape[0], x.shape[1], y.shape[1])


def _sqdist_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    ctx.save_for_backward(*inputs)


def _sqdist_backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor]:
    x, y = ctx.saved_tensors
    grad_x = 2 * (grad.sum(1, keepdim=True) * x - grad @ y)
    grad_y = 2 * (grad.sum(0).unsqueeze(1) * y - grad.t() @ x)
    return grad_x, grad_y


def _points(device: torch.device, size: int | None = None) -> Iterator[SampleInput]:
    """The checks' samples; with ``size`` (``opreg bench`` passes it), one sample whose
    larger input has about ``size`` elements: ``size // 16`` points against 64 centers."""
    if size is not None:
        n = max(1, size // 16)
        points = torch.randn(n, 16, device=device)
        yield SampleInput((points, torch.randn(64, 16, device=device)), name=f"{n} x 16, 64 x 16")
        return
    yield SampleInput(
        (torch.randn(4, 3, device=device), torch.randn(5, 3, device=device)), name="4x3, 5x3"
    )
    yield SampleInput(
        (torch.randn(1, 2, device=device), torch.randn(3, 2, device=device)), name="one row"
    )
    yield SampleInput(
        (
            torch.randn(3, 2, dtype=torch.float64, device=device),
            torch.randn(2, 2, dtype=torch.float64, device=device),
        ),
        name="float64",
    )


@register_vmap_op(
    fake_fn=_sqdist_fake,
    vmap_fn=_sqdist,  # the same formula handles a leading batch dim
    fake_vmap_fn=_sqdist_fake_batched,
    backward=_sqdist_backward,
    setup_context=_sqdist_setup,
    sample_inputs=_points,
)
def pairwise_sqdist(x: Tensor, y: Tensor) -> Tensor:
    """Squared Euclidean distances between the rows of ``x`` (n, d) and ``y`` (m, d): (n, m)."""
    return _sqdist(x, y)


def _nearest_fake(x: Tensor, centers: Tensor) -> Tensor:
    return x.new_empty(x.shape[0], dtype=torch.int64)


def _nearest_fake_batched(x: Tensor, centers: Tensor) -> Tensor:
    return x.new_empty(x.shape[0], x.shape[1], dtype=torch.int64)


@register_vmap_op(
    fake_fn=_nearest_fake,
    vmap_fn=lambda x, centers: _sqdist(x, centers).argmin(-1),
    fake_vmap_fn=_nearest_fake_batched,
    differentiable=False,  # an index: no gradient by nature
    sample_inputs=_points,
)
def nearest_index(x: Tensor, centers: Tensor) -> Tensor:
    """For each row of ``x`` (n, d), the index of the nearest row of ``centers`` (k, d): (n,)."""
    return _sqdist(x, centers).argmin(-1)


def _soft_clamp_math(x: Tensor, limit: float) -> Tensor:
    """``x / (1 + |x| / limit)`` elementwise, contiguous (as the Triton launcher returns it)."""
    return (x / (1 + x.abs() / limit)).contiguous()


def _soft_clamp_samples(device: torch.device, size: int | None = None) -> Iterator[SampleInput]:
    """The checks' samples; with ``size`` (``opreg bench``), ``size`` float32 values."""
    if size is not None:
        yield SampleInput((torch.randn(size, device=device) * 3, 2.0), name=f"{size} values")
        return
    yield SampleInput((torch.randn(4, 70, device=device) * 3, 2.0), name="4x70, limit 2")
    yield SampleInput(
        (torch.randn(5, dtype=torch.float64, device=device), 0.5), name="float64, limit 0.5"
    )


def _soft_clamp_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, limit = inputs
    ctx.save_for_backward(x)
    ctx.limit = limit


def _soft_clamp_backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
    (x,) = ctx.saved_tensors
    return grad / (1 + x.abs() / ctx.limit).square(), None


@register_triton_op(
    fake_fn=lambda x, limit: torch.empty(x.shape, dtype=x.dtype, device=x.device),
    triton_fn="downstream_ops.triton_kernels:launch",
    vmap_fn=_soft_clamp_math,  # elementwise: the same formula handles a batch dim
    fake_vmap_fn=lambda x, limit: torch.empty(x.shape, dtype=x.dtype, device=x.device),
    backward=_soft_clamp_backward,
    setup_context=_soft_clamp_setup,
    sample_inputs=_soft_clamp_samples,
)
def soft_clamp(x: Tensor, limit: float) -> Tensor:
    """``x / (1 + |x| / limit)``: close to ``x`` near 0, never beyond ``±limit``."""
    return _soft_clamp_math(x, limit)
