"""Triton kernels for test_fast_kernel.py, each with arguments whose specialisation matters:
pointers (dtype, alignment), integers (1, multiples of 16, int32/int64 width), floats, None,
constexprs with defaults. Imported only by tests that have Triton."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit  # type: ignore[untyped-decorator]
def axpy_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr = 128):  # type: ignore[no-untyped-def]
    """out = alpha * x + y."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, (alpha * x + y).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit  # type: ignore[untyped-decorator]
def bias_kernel(x_ptr, bias_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    """out = x + bias, or out = x when bias_ptr is None (a constexpr None to Triton)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    if bias_ptr is not None:
        x = x + tl.load(bias_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x, mask=mask)


@triton.jit  # type: ignore[untyped-decorator]
def offset_kernel(out_ptr, n, base, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    """out[i] = (base + i) % 1009, with base an int32, int64 or the constant 1 to Triton."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    value = (base + offsets.to(tl.int64)) % 1009
    tl.store(out_ptr + offsets, value.to(tl.int64), mask=offsets < n)


@triton.jit  # type: ignore[untyped-decorator]
def row_sum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    """out[row] = sum(x[row, :n_cols]); BLOCK >= n_cols (heuristics choose it)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


@triton.jit  # type: ignore[untyped-decorator]
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    """out = 2 * x."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=mask), mask=mask)
