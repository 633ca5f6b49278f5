"""A Triton launcher whose kernel cannot compile (for the fault tests): it reads a name that
does not exist inside the ``@triton.jit`` body. Imported only by a test that has Triton."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _broken_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + no_such_name, mask=mask)  # noqa: F821


def launch(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    _broken_kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
    return out
