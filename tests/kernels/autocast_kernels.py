"""A Triton RMSNorm-like row kernel for test_autocast_triton.py: each row of ``x`` (any
leading dims) scaled by ``rsqrt(mean(x**2) + eps)`` and by ``w``, computed in float32 and
stored in ``x``'s dtype. The launcher records the dtypes it receives (the kernel sees the
autocast dtype). Imported only by tests that have Triton."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

#: The dtypes of (x, w) at each launch, last launch first.
LAUNCHED: list[tuple[torch.dtype, torch.dtype]] = []


@triton.jit  # type: ignore[untyped-decorator]
def rms_norm_kernel(x_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    scale = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    y = x * scale * w
    tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def launch(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """The op's launcher, and its batched op's: ``x`` (..., n) and ``w`` (n) or, batched,
    ``x`` (B, ..., n) and ``w`` (B, n); ``w`` is expanded to one row per row of ``x``."""
    LAUNCHED.insert(0, (x.dtype, w.dtype))
    x = x.contiguous()
    while w.dim() < x.dim():
        w = w.unsqueeze(-2)
    w = w.expand(x.shape)
    n_cols = x.shape[-1]
    out = torch.empty_like(x)
    rows = x.numel() // n_cols if n_cols else 0
    if rows:
        block = triton.next_power_of_2(n_cols)
        rms_norm_kernel[(rows,)](x, w.contiguous(), out, n_cols, eps, BLOCK=block)
    return out
