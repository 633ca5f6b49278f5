"""``opreg::fused_add``: the reference example of a Triton op with every piece in place.

- the fallback, ``reference.add`` (checked PyTorch), runs on every device without a Triton
  kernel; element-wise, it serves as ``vmap_fn`` on batched inputs too;
- the fake describes the output for ``torch.compile``/``torch.export``;
- the Triton launchers (``triton_kernels.py``) are named by string, so Triton is
  imported on the first CUDA call and never by ``import opreg_kernels``;
- the backward sends the incoming gradient to both inputs, and the jvp adds the input
  tangents (forward mode: ``torch.func.jvp``, ``jacfwd``, ``hessian``, dual tensors);
- ``sharding="elementwise"`` lets it run on DTensors sharded any way (same placement out);
- ``compiler_visible=True``: under ``torch.compile`` on CUDA the compiled code launches the
  Triton kernel itself (the launcher's ``wrap_triton`` branch), and AOTInductor packages run
  it without opreg; on CPU the op stays opaque and runs the fallback, as in eager.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from opreg_core import SampleInput

from ..._register import register_triton_op
from .._arguments import check_same_layout
from .reference import NAME, add

__all__ = ["fused_add"]

_LAUNCHER = "opreg_kernels.ops.fused_add.triton_kernels:launch"


def _fake(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    check_same_layout(NAME, x, y)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return grad, grad


def _jvp(ctx: Any, x_t: torch.Tensor | None, y_t: torch.Tensor | None) -> torch.Tensor | None:
    if x_t is None or y_t is None:  # one shape for both: a lone tangent is the output's
        return y_t if x_t is None else x_t
    return torch.add(x_t, y_t)


def _sample_inputs(device: torch.device) -> Iterator[SampleInput]:
    def make(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        if dtype.is_floating_point:
            return torch.randn(shape, dtype=dtype, device=device)
        return torch.randint(-100, 100, shape, dtype=dtype, device=device)

    yield SampleInput((make(5), make(5)), name="vector")
    yield SampleInput(
        (make(3, 4, dtype=torch.float64), make(3, 4, dtype=torch.float64)), name="float64"
    )
    yield SampleInput((make(6, dtype=torch.int32), make(6, dtype=torch.int32)), name="int32")
    yield SampleInput((make(4, 3).t(), make(3, 4)), name="non-contiguous")
    yield SampleInput((make(0, 2), make(0, 2)), name="empty")
    yield SampleInput((make(), make()), name="scalar")


@register_triton_op(
    name="opreg::fused_add",
    sharding="elementwise",
    fake_fn=_fake,
    triton_fn=_LAUNCHER,
    vmap_fn=add,
    fake_vmap_fn=_fake,
    triton_vmap_fn=_LAUNCHER,
    compiler_visible=True,
    backward=_backward,
    jvp=_jvp,
    sample_inputs=_sample_inputs,
)
def fused_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``x + y`` for two tensors of one shape, dtype and device, as a new contiguous tensor.

    No broadcasting or type promotion (TypeError/ValueError otherwise). Runs a
    Triton kernel on CUDA when Triton is available; results are identical to
    ``torch.add``. Gradients flow to both inputs, in reverse and forward mode.
    """
    return add(x, y)
