"""The Triton kernel of ``downstream_ops::soft_clamp`` and its launcher.

Imported only on the first launch (``triton_fn="downstream_ops.triton_kernels:launch"``), so
``import downstream_ops`` works without Triton: the op then runs its PyTorch fallback.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor


@triton.jit
def _soft_clamp(x_ptr, out_ptr, n, limit, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)  # in its own dtype: float64 stays float64
    y = x / (1.0 + tl.abs(x) / limit)
    tl.store(out_ptr + offsets, y, mask=mask)


def launch(x: Tensor, limit: float) -> Tensor:
    """``soft_clamp(x, limit)`` by the Triton kernel (any shape and strides: it copies ``x``
    to contiguous memory and returns a contiguous output, as the fallback does)."""
    x = x.contiguous()
    out = torch.empty_like(x)
    block = 256
    _soft_clamp[(triton.cdiv(x.numel(), block),)](x, out, x.numel(), limit, BLOCK=block)
    return out
