"""Box-Muller's radius of the Philox kernels, applied to given words (for the accuracy test).
Imported only by a test that has Triton."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from opreg_kernels.ops.philox import triton_kernels as philox

_BLOCK = 4096


@triton.jit
def _radius_kernel(words_ptr, out_ptr, BLOCK: tl.constexpr, PTX_MATH: tl.constexpr):  # type: ignore[no-untyped-def]
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    words = tl.load(words_ptr + offsets).to(tl.uint32, bitcast=True)
    tl.store(out_ptr + offsets, philox._radius(words, PTX_MATH))


def radius(words: torch.Tensor, ptx_math: bool) -> torch.Tensor:
    """``r`` for each int32 word (its bits read as uint32); numel a multiple of 4096."""
    out = torch.empty(words.shape, dtype=torch.float32, device=words.device)
    _radius_kernel[(words.numel() // _BLOCK,)](words, out, BLOCK=_BLOCK, PTX_MATH=ptx_math)
    return out
