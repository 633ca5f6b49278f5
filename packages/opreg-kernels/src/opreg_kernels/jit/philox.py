# mypy: disallow-untyped-defs=False, disallow-incomplete-defs=False
# mypy: disallow-untyped-decorators=False
# (Triton ships no type information, and @triton.jit bodies take untyped tensor arguments.)
"""Triton Philox4x32-10 kernels writing rows of uniforms or Box-Muller normals.

Bit layout identical to :mod:`opreg_kernels.ops.philox_torch`: the uniforms
match the PyTorch fallback bit for bit; the normals match it to within the
accuracy of the device's log/sqrt/sin/cos.

Two grids produce the same values. Long rows (at least ``block`` Philox calls)
give each program a chunk of one row, so the key is a per-program scalar and no
per-element division is needed; short rows use a flat grid over all
(row, call) pairs, so that many tiny rows still fill whole blocks.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..ops.checks import check_philox_args
from ..ops.philox_torch import (
    BOX_MULLER_MIN_U1,
    PHILOX_M0,
    PHILOX_M1,
    PHILOX_W0,
    PHILOX_W1,
    TWO_PI_F32,
    UNIFORM_SCALE,
)

__all__ = [
    "DEFAULT_BLOCK",
    "DEFAULT_NUM_WARPS",
    "launch_normal",
    "launch_normal_batched",
    "launch_rows",
    "launch_uniform",
    "launch_uniform_batched",
]

_M0: tl.constexpr = tl.constexpr(PHILOX_M0)
_M1: tl.constexpr = tl.constexpr(PHILOX_M1)
_W0: tl.constexpr = tl.constexpr(PHILOX_W0)
_W1: tl.constexpr = tl.constexpr(PHILOX_W1)
_SCALE: tl.constexpr = tl.constexpr(UNIFORM_SCALE)
_TWO_PI: tl.constexpr = tl.constexpr(TWO_PI_F32)
_MIN_U1: tl.constexpr = tl.constexpr(BOX_MULLER_MIN_U1)

#: Philox calls (4 outputs each) per program, and warps per program.
DEFAULT_BLOCK = 512
DEFAULT_NUM_WARPS = 4
_INT32_LIMIT = 2**31


@triton.jit
def _philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Ten Philox rounds on uint32 words; the key is bumped between rounds.

    The 32x32->64-bit products compile to one wide multiply each (hi and lo words).
    """
    for i in tl.static_range(10):
        if i > 0:
            k0 = k0 + _W0
            k1 = k1 + _W1
        p0 = c0.to(tl.uint64) * _M0
        p1 = c2.to(tl.uint64) * _M1
        c0, c1, c2, c3 = (
            (p1 >> 32).to(tl.uint32) ^ c1 ^ k0,
            p1.to(tl.uint32),
            (p0 >> 32).to(tl.uint32) ^ c3 ^ k1,
            p0.to(tl.uint32),
        )
    return c0, c1, c2, c3


@triton.jit
def _uniform(word):
    return (word >> 8).to(tl.float32) * _SCALE


@triton.jit
def _box_muller(u1, u2):
    r = tl.sqrt(-2.0 * tl.log(tl.maximum(u1, _MIN_U1)))
    theta = u2 * _TWO_PI
    return r * tl.cos(theta), r * tl.sin(theta)


@triton.jit
def _philox_values(seed, step, counter_lo, counter_hi, NORMAL: tl.constexpr):
    """``(len(step), 4)`` outputs of Philox calls ``step`` of the row keyed by ``seed``."""
    k0 = (seed & 0xFFFFFFFF).to(tl.uint32)
    k1 = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)
    # counter_lo/hi arrive as int32 bit patterns (one compiled variant for every counter).
    c0 = step.to(tl.uint32) + counter_lo.to(tl.uint32, bitcast=True)
    c1 = tl.zeros_like(c0) + counter_hi.to(tl.uint32, bitcast=True)
    zero = tl.zeros_like(c0)
    w0, w1, w2, w3 = _philox4x32_10(c0, c1, zero, zero, k0, k1)
    v0 = _uniform(w0)
    v1 = _uniform(w1)
    v2 = _uniform(w2)
    v3 = _uniform(w3)
    if NORMAL:
        v0, v1 = _box_muller(v0, v1)
        v2, v3 = _box_muller(v2, v3)
    # Interleave so that each thread holds (and stores) a call's 4 outputs contiguously.
    return tl.reshape(tl.join(tl.join(v0, v2), tl.join(v1, v3)), (step.shape[0], 4))


@triton.jit(do_not_specialize=["counter_lo", "counter_hi"])
def _philox_long_rows_kernel(
    seeds_ptr,
    out_ptr,
    n,
    calls_per_row,
    chunks_per_row,
    counter_lo,
    counter_hi,
    NORMAL: tl.constexpr,
    WIDE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Program ``pid`` computes calls ``[chunk*BLOCK, (chunk+1)*BLOCK)`` of one row."""
    pid = tl.program_id(0)
    row = pid // chunks_per_row
    chunk = pid - row * chunks_per_row
    start = chunk.to(tl.int64) * BLOCK if WIDE else chunk * BLOCK
    step = start + tl.arange(0, BLOCK)
    seed = tl.load(seeds_ptr + row)
    values = _philox_values(seed, step, counter_lo, counter_hi, NORMAL)
    col = 4 * step[:, None] + tl.arange(0, 4)[None, :]
    base = row.to(tl.int64) * n if WIDE else row * n
    tl.store(out_ptr + base + col, values, mask=(step[:, None] < calls_per_row) & (col < n))


@triton.jit(do_not_specialize=["counter_lo", "counter_hi"])
def _philox_short_rows_kernel(
    seeds_ptr,
    out_ptr,
    n,
    calls_per_row,
    total_calls,
    counter_lo,
    counter_hi,
    NORMAL: tl.constexpr,
    WIDE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Program ``pid`` computes flat calls ``[pid*BLOCK, (pid+1)*BLOCK)`` of all rows."""
    pid = tl.program_id(0)
    if WIDE:
        call = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    else:
        call = pid * BLOCK + tl.arange(0, BLOCK)
    active = call < total_calls
    row = call // calls_per_row
    step = call - row * calls_per_row
    seed = tl.load(seeds_ptr + row, mask=active, other=0)
    values = _philox_values(seed, step, counter_lo, counter_hi, NORMAL)
    col = 4 * step[:, None] + tl.arange(0, 4)[None, :]
    tl.store(out_ptr + row[:, None] * n + col, values, mask=active[:, None] & (col < n))


def _as_int32_bits(value: int) -> int:
    """The int32 with the same 32 bits as ``value`` (0 <= value < 2**32)."""
    return value - 2**32 if value >= _INT32_LIMIT else value


def launch_rows(
    seeds: torch.Tensor,
    n: int,
    counter: int,
    *,
    normal: bool,
    block: int = DEFAULT_BLOCK,
    num_warps: int = DEFAULT_NUM_WARPS,
) -> torch.Tensor:
    """Launch a Philox kernel for the flattened ``seeds``: returns ``(seeds.numel(), n)`` float32.

    No argument checks here (the op launchers do them); ``block`` and ``num_warps``
    exist for tuning (see ``benchmarks/bench_kernels.py``).
    """
    seeds = seeds.reshape(-1).contiguous()
    rows = seeds.shape[0]
    out = torch.empty((rows, n), dtype=torch.float32, device=seeds.device)
    calls_per_row = (n + 3) // 4
    total_calls = rows * calls_per_row
    if total_calls == 0:
        return out
    # int64 indices once any (masked) output index could pass int32.
    wide = (rows + 1) * 4 * (calls_per_row + block) >= _INT32_LIMIT
    lo = _as_int32_bits(counter & 0xFFFFFFFF)
    hi = _as_int32_bits((counter >> 32) & 0xFFFFFFFF)
    if calls_per_row >= block:
        chunks = triton.cdiv(calls_per_row, block)
        kernel, size, grid = _philox_long_rows_kernel, chunks, rows * chunks
    else:
        kernel, size, grid = _philox_short_rows_kernel, total_calls, triton.cdiv(total_calls, block)
    kernel[(grid,)](
        seeds, out, n, calls_per_row, size, lo, hi,
        NORMAL=normal, WIDE=wide, BLOCK=block, num_warps=num_warps,
    )  # fmt: skip
    return out


def launch_uniform(seeds: torch.Tensor, n: int, counter: int = 0) -> torch.Tensor:
    """Triton launcher of ``opreg::philox_uniform``."""
    check_philox_args("opreg: opreg::philox_uniform", seeds, n, counter)
    return launch_rows(seeds, n, counter, normal=False)


def launch_normal(seeds: torch.Tensor, n: int, counter: int = 0) -> torch.Tensor:
    """Triton launcher of ``opreg::philox_normal``."""
    check_philox_args("opreg: opreg::philox_normal", seeds, n, counter)
    return launch_rows(seeds, n, counter, normal=True)


def launch_uniform_batched(seeds: torch.Tensor, n: int, counter: int = 0) -> torch.Tensor:
    """Triton launcher of the batched ``philox_uniform``: seeds ``(B, S)`` -> ``(B, S, n)``."""
    check_philox_args("opreg: opreg::philox_uniform", seeds, n, counter, seed_dims=2)
    return launch_rows(seeds, n, counter, normal=False).reshape(*seeds.shape, n)


def launch_normal_batched(seeds: torch.Tensor, n: int, counter: int = 0) -> torch.Tensor:
    """Triton launcher of the batched ``philox_normal``: seeds ``(B, S)`` -> ``(B, S, n)``."""
    check_philox_args("opreg: opreg::philox_normal", seeds, n, counter, seed_dims=2)
    return launch_rows(seeds, n, counter, normal=True).reshape(*seeds.shape, n)
