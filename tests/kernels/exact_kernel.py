"""The exact Box-Muller's two halves (``_exact_radius``, ``_exact_turn`` of the Philox kernels)
applied to given words, for the exhaustive tests. Imported only by tests that have Triton."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from opreg_kernels.ops.philox import triton_kernels as philox


@triton.jit
def _halves_kernel(words_ptr, r_ptr, cos_ptr, sin_ptr, BLOCK: tl.constexpr, HW_FMA: tl.constexpr):  # type: ignore[no-untyped-def]
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    words = tl.load(words_ptr + offsets).to(tl.uint32, bitcast=True)
    tl.store(r_ptr + offsets, philox._exact_radius(words, HW_FMA))
    a, b, sign = philox._exact_turn(words, HW_FMA)
    tl.store(cos_ptr + offsets, philox._flip_sign(a, sign))
    tl.store(sin_ptr + offsets, philox._flip_sign(b, sign))


def exact_halves(
    words: torch.Tensor, block: int, hw_fma: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``r`` of each int32 word read as ``u1``, and ``(cos, sin)`` of it read as ``u2``;
    ``words.numel()`` a multiple of ``block``. ``hw_fma``: the device's fused multiply-add
    (``tl.fma``); otherwise the float64 one of the fallback and the interpreter."""
    r, c, s = (torch.empty(words.shape, dtype=torch.float32, device=words.device) for _ in "rcs")
    grid = (words.numel() // block,)
    _halves_kernel[grid](words, r, c, s, BLOCK=block, HW_FMA=hw_fma, **philox._EXACT_OPTIONS)
    return r, c, s
