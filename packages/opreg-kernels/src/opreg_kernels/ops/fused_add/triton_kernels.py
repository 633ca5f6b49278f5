# mypy: disallow-untyped-defs=False, disallow-incomplete-defs=False
# mypy: disallow-untyped-decorators=False
# (Triton ships no type information, and @triton.jit bodies take untyped tensor arguments.)
"""Triton element-wise add: the launcher of ``opreg::fused_add`` and of its batched op."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..._compiled_launch import FastLaunch, int_spec
from .._arguments import check_same_layout
from .reference import NAME

__all__ = ["DEFAULT_BLOCK", "DEFAULT_NUM_WARPS", "launch", "launch_add"]

DEFAULT_BLOCK = 4096
DEFAULT_NUM_WARPS = 8
#: Stream the inputs past the caches (``evict_first``): each byte is read once.
DEFAULT_EVICT = False
_INT32_LIMIT = 2**31


@triton.jit
def _add_kernel(
    x_ptr, y_ptr, out_ptr, numel, WIDE: tl.constexpr, BLOCK: tl.constexpr, EVICT: tl.constexpr
):
    pid = tl.program_id(0)
    start = pid.to(tl.int64) * BLOCK if WIDE else pid * BLOCK
    offsets = start + tl.arange(0, BLOCK)
    mask = offsets < numel
    if EVICT:
        x = tl.load(x_ptr + offsets, mask=mask, eviction_policy="evict_first")
        y = tl.load(y_ptr + offsets, mask=mask, eviction_policy="evict_first")
        tl.store(out_ptr + offsets, x + y, mask=mask, cache_modifier=".cs")
    else:
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, x + y, mask=mask)


_launch_add = FastLaunch(_add_kernel)


def launch_add(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    block: int = DEFAULT_BLOCK,
    num_warps: int = DEFAULT_NUM_WARPS,
    evict: bool = DEFAULT_EVICT,
) -> torch.Tensor:
    """``x + y`` as a new contiguous tensor (inputs of one shape and dtype; no checks).

    Plain tensors (eager) take the fast launch; any other tensor (the functional tensors of
    ``torch.compile``'s trace of the compiler-visible op) the traceable
    ``torch.library.wrap_triton`` launch, which puts the kernel itself into the graph.
    """
    x = x.contiguous()
    y = y.contiguous()
    out = torch.empty_like(x)
    numel = x.numel()
    if numel:
        # int64 offsets once the last block's (masked) offsets could pass int32.
        wide = numel + block >= _INT32_LIMIT
        if type(x) is not torch.Tensor:
            torch.library.wrap_triton(_add_kernel)[((numel + block - 1) // block,)](
                x, y, out, numel, WIDE=wide, BLOCK=block, EVICT=evict, num_warps=num_warps
            )
            return out
        key = (
            x.get_device(), x.dtype, x.data_ptr() & 15, y.data_ptr() & 15, out.data_ptr() & 15,
            int_spec(numel), wide, block, num_warps, evict,
        )  # fmt: skip
        _launch_add(
            key, (numel + block - 1) // block, key[0], (x, y, out, numel), num_warps,
            {"WIDE": wide, "BLOCK": block, "EVICT": evict},
        )  # fmt: skip
    return out


def launch(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Triton launcher of ``opreg::fused_add`` (and of its batched op: same computation)."""
    check_same_layout(NAME, x, y)
    return launch_add(x, y)
