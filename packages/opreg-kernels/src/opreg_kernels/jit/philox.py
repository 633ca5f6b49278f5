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
from ._fast import FastLaunch, int_spec

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
#: Box-Muller's sin/cos from one shared range reduction and short polynomials (instead
#: of two libdevice calls, each with its own reduction and a slow path for huge angles).
DEFAULT_FAST_SINCOS = True
_INT32_LIMIT = 2**31

# sin/cos on |x| <= pi/4 (Cephes sinf/cosf minimax coefficients, ~1 ulp there), and pi/2
# split in three (the first two with few bits, so q * part is exact for the q <= 4 used here).
_S1: tl.constexpr = tl.constexpr(-1.6666654611e-1)
_S2: tl.constexpr = tl.constexpr(8.3321608736e-3)
_S3: tl.constexpr = tl.constexpr(-1.9515295891e-4)
_C1: tl.constexpr = tl.constexpr(4.166664568298827e-2)
_C2: tl.constexpr = tl.constexpr(-1.388731625493765e-3)
_C3: tl.constexpr = tl.constexpr(2.443315711809948e-5)
_PIO2_1: tl.constexpr = tl.constexpr(1.5703125)
_PIO2_2: tl.constexpr = tl.constexpr(4.837512969970703125e-4)
_PIO2_3: tl.constexpr = tl.constexpr(7.54978995489188216e-8)
_TWO_OVER_PI: tl.constexpr = tl.constexpr(0.6366197723675814)


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
def _sincos(theta):
    """``(cos(theta), sin(theta))`` for 0 <= theta < 2*pi: one reduction to [-pi/4, pi/4]."""
    q = tl.floor(theta * _TWO_OVER_PI + 0.5)
    x = theta - q * _PIO2_1
    x = x - q * _PIO2_2
    x = x - q * _PIO2_3
    z = x * x
    s = x + x * z * (_S1 + z * (_S2 + z * _S3))
    c = 1.0 - 0.5 * z + z * z * (_C1 + z * (_C2 + z * _C3))
    quadrant = q.to(tl.int32)
    odd = (quadrant & 1) != 0
    sin_v = tl.where(odd, c, s)
    cos_v = tl.where(odd, s, c)
    sin_v = tl.where((quadrant & 2) != 0, -sin_v, sin_v)
    cos_v = tl.where(((quadrant + 1) & 2) != 0, -cos_v, cos_v)
    return cos_v, sin_v


@triton.jit
def _box_muller(u1, u2, FAST_SINCOS: tl.constexpr):
    r = tl.sqrt(-2.0 * tl.log(tl.maximum(u1, _MIN_U1)))
    theta = u2 * _TWO_PI
    if FAST_SINCOS:
        cos_v, sin_v = _sincos(theta)
    else:
        cos_v = tl.cos(theta)
        sin_v = tl.sin(theta)
    return r * cos_v, r * sin_v


@triton.jit
def _philox_values(
    seed, step, counter_lo, counter_hi, NORMAL: tl.constexpr, FAST_SINCOS: tl.constexpr
):
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
        v0, v1 = _box_muller(v0, v1, FAST_SINCOS)
        v2, v3 = _box_muller(v2, v3, FAST_SINCOS)
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
    FAST_SINCOS: tl.constexpr,
):
    """Program ``pid`` computes calls ``[chunk*BLOCK, (chunk+1)*BLOCK)`` of one row."""
    pid = tl.program_id(0)
    row = pid // chunks_per_row
    chunk = pid - row * chunks_per_row
    start = chunk.to(tl.int64) * BLOCK if WIDE else chunk * BLOCK
    step = start + tl.arange(0, BLOCK)
    seed = tl.load(seeds_ptr + row)
    values = _philox_values(seed, step, counter_lo, counter_hi, NORMAL, FAST_SINCOS)
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
    FAST_SINCOS: tl.constexpr,
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
    values = _philox_values(seed, step, counter_lo, counter_hi, NORMAL, FAST_SINCOS)
    col = 4 * step[:, None] + tl.arange(0, 4)[None, :]
    tl.store(out_ptr + row[:, None] * n + col, values, mask=active[:, None] & (col < n))


_long_rows = FastLaunch(_philox_long_rows_kernel)
_short_rows = FastLaunch(_philox_short_rows_kernel)


def launch_rows(
    seeds: torch.Tensor,
    n: int,
    counter: int,
    *,
    normal: bool,
    block: int = DEFAULT_BLOCK,
    num_warps: int = DEFAULT_NUM_WARPS,
    fast_sincos: bool = DEFAULT_FAST_SINCOS,
) -> torch.Tensor:
    """Launch a Philox kernel for the flattened ``seeds``: returns ``(seeds.numel(), n)`` float32.

    No argument checks here (the op launchers do them); ``block``, ``num_warps`` and
    ``fast_sincos`` exist for tuning (see ``benchmarks/bench_kernels.py``).
    """
    if seeds.dim() != 1:
        seeds = seeds.reshape(-1)
    seeds = seeds.contiguous()
    rows = seeds.shape[0]
    out = torch.empty((rows, n), dtype=torch.float32, device=seeds.device)
    calls_per_row = (n + 3) >> 2
    total_calls = rows * calls_per_row
    if total_calls == 0:
        return out
    lo = counter & 0xFFFFFFFF
    hi = (counter >> 32) & 0xFFFFFFFF
    # counter words travel as int32 bit patterns (one compiled variant for every counter).
    if lo >= _INT32_LIMIT:
        lo -= 2**32
    if hi >= _INT32_LIMIT:
        hi -= 2**32
    # int64 indices once any index a program computes (masked lanes included) could pass
    # int32: long rows index up to rows * n + 4 * block; short rows reach row
    # (total_calls + block) // calls_per_row, i.e. output offsets below 4 * (total + block + cpr).
    if calls_per_row >= block:
        chunks = (calls_per_row + block - 1) // block
        wide = (rows + 1) * n + 4 * (chunks * block + block) >= _INT32_LIMIT
        launch, size, grid = _long_rows, chunks, rows * chunks
    else:
        wide = 4 * (total_calls + block + calls_per_row + 1) >= _INT32_LIMIT
        launch, size, grid = _short_rows, total_calls, (total_calls + block - 1) // block
    device = seeds.get_device()
    key = (
        launch is _long_rows, device, seeds.data_ptr() & 15, out.data_ptr() & 15,
        int_spec(n), int_spec(calls_per_row), int_spec(size),
        normal, wide, block, num_warps, fast_sincos,
    )  # fmt: skip
    launch(
        key, grid, device, (seeds, out, n, calls_per_row, size, lo, hi), num_warps,
        {"NORMAL": normal, "WIDE": wide, "BLOCK": block, "FAST_SINCOS": fast_sincos},
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
