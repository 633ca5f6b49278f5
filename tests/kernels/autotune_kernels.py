"""Triton kernels for test_autotune.py: plain ``@triton.jit`` bodies that each test wraps in a
fresh ``triton.autotune``/``triton.heuristics`` (so no tuning is cached between tests).
Imported only by tests that have Triton."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl


@triton.jit  # type: ignore[untyped-decorator]
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, BUG: tl.constexpr = 0):  # type: ignore[no-untyped-def]
    """out = 2 * x. BUG=1: out = 2 * x + 1; BUG=2: the last block is not written."""
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    limit = n
    if BUG == 2:  # a bound that stops short of the last block (a block-wide mask of bools)
        limit = tl.minimum(n, (tl.num_programs(0) - 1) * BLOCK)
    mask = offsets < limit
    value = 2 * tl.load(x_ptr + offsets, mask=mask)
    if BUG == 1:
        value = value + 1
    tl.store(out_ptr + offsets, value, mask=mask)


@triton.jit  # type: ignore[untyped-decorator]
def add_into_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    """y += x, in place."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, y + tl.load(x_ptr + offsets, mask=mask), mask=mask)


@triton.jit  # type: ignore[untyped-decorator]
def sum_kernel(x_ptr, total_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    """total += sum(x), one atomic add per block (total must start at zero)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
    tl.atomic_add(total_ptr, tl.sum(x, axis=0))


def blocks(n: int) -> Callable[[dict[str, Any]], tuple[int]]:
    """The grid of a kernel whose BLOCK comes from its config: one program per block."""
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


def scale_with(kernel: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """A launcher of ``out = 2 * x`` through ``kernel`` (an autotuned scale_kernel)."""

    def launch(x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        kernel[blocks(x.numel())](x, out, x.numel())
        return out

    return launch
