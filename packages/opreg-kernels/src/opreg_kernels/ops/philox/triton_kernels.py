# mypy: disallow-untyped-defs=False, disallow-incomplete-defs=False
# mypy: disallow-untyped-decorators=False
# (Triton ships no type information, and @triton.jit bodies take untyped tensor arguments.)
"""Triton Philox4x32-10 kernels writing rows of uniforms or Box-Muller normals.

Bit layout identical to :mod:`opreg_kernels.ops.philox.reference`: the uniforms
match the PyTorch fallback bit for bit; the normals match it to within the
accuracy of the device's log/sqrt/sin/cos.

Two grids produce the same values. Long rows (at least ``block`` Philox calls)
give each program a chunk of one row, so the key is a per-program scalar and no
per-element division is needed, and each program computes ``loop`` blocks one
after the other; short rows use a flat grid over all (row, call) pairs, so that
many tiny rows still fill whole blocks. Where the grid covers the output
exactly, the stores are unmasked.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..._availability import triton_interpreted
from ..._compiled_launch import FastLaunch, int_spec
from .._arguments import check_philox_args
from . import exact as _exact
from .reference import (
    BOX_MULLER_MIN_U1,
    NORMAL_NAME,
    PHILOX_M0,
    PHILOX_M1,
    PHILOX_W0,
    PHILOX_W1,
    TWO_PI_F32,
    UNIFORM_NAME,
    UNIFORM_SCALE,
)

__all__ = [
    "DEFAULT_BLOCK",
    "DEFAULT_LOOP",
    "DEFAULT_NUM_WARPS",
    "launch_normal",
    "launch_normal_batched",
    "launch_normal_exact",
    "launch_normal_exact_batched",
    "launch_rows",
    "launch_uniform",
    "launch_uniform_batched",
]

_M0: tl.constexpr = tl.constexpr(PHILOX_M0)
_M1: tl.constexpr = tl.constexpr(PHILOX_M1)
_W0: tl.constexpr = tl.constexpr(PHILOX_W0)
_W1: tl.constexpr = tl.constexpr(PHILOX_W1)
_SCALE: tl.constexpr = tl.constexpr(UNIFORM_SCALE)
_MIN_U1: tl.constexpr = tl.constexpr(BOX_MULLER_MIN_U1)

#: Philox calls (4 outputs each) per block (a short-row program), and warps per program: 8
#: calls per thread (the best of the sweeps in ``benchmarks/bench_kernels.py`` and
#: ``benchmarks/probes/sweep_normal.py`` on an H200).
DEFAULT_BLOCK = 1024
DEFAULT_NUM_WARPS = 4
#: Box-Muller's sin/cos from one shared range reduction, a short polynomial for sin and
#: cos = sqrt(1 - sin^2) (instead of two libdevice calls, each with its own reduction).
DEFAULT_FAST_SINCOS = True
#: On NVIDIA GPUs: Box-Muller's log from the hardware log2 (PTX ``lg2.approx``, with a
#: series near u1 = 1 where its absolute error would dominate) and a two-part reduction by
#: fused multiply-adds. Never under the interpreter or on ROCm (libdevice log, three parts).
#: For ``philox_normal_exact``: its fused multiply-adds on the device's ``fma`` instruction
#: (elsewhere in float64, rounded once to float32: the same bits, see ``_fma32``).
DEFAULT_PTX_MATH = True
#: Blocks of ``block`` calls per long-row program, one after the other (the row/chunk
#: division, the seed load and the program start paid once per ``loop * block`` calls): the
#: best of ``benchmarks/probes/sweep_normal.py`` on an H200 (8 about equal).
DEFAULT_LOOP = 4
#: The exact kernel's launch shapes (``benchmarks/exact_normal.py`` on an H200, run12 of
#: benchmarks/results/gpu/2026-12-02): long rows (at least ``EXACT_LONG_BLOCK`` calls) in
#: programs of 1024 calls on 4 warps (8 calls per thread, as the default kernel; 8 warps within
#: 1 %), short rows in blocks of 512 calls on 4 warps (4 per thread; 256 calls: 4 % slower).
EXACT_LONG_BLOCK = 1024
EXACT_LONG_NUM_WARPS = 4
EXACT_SHORT_BLOCK = 512
EXACT_SHORT_NUM_WARPS = 4
_INT32_LIMIT = 2**31
#: The exact kernel's compile options: no multiply and add contracted into an fma (the
#: transform's fmas are its own).
_EXACT_OPTIONS = {"enable_fp_fusion": False}
#: Whether the kernels below run in Triton's interpreter: asked at import, when ``@triton.jit``
#: decides it for them (see ``_compiled_launch``).
_INTERPRETED = triton_interpreted()

# sin on |x| <= pi/4 (Cephes sinf minimax coefficients, ~1 ulp there); pi/2 as the float32
# nearest to it plus the rest (for fused multiply-adds), or split in three, the first two with
# few bits, so that q * part is exact for the q <= 4 used here.
_S1: tl.constexpr = tl.constexpr(-1.6666654611e-1)
_S2: tl.constexpr = tl.constexpr(8.3321608736e-3)
_S3: tl.constexpr = tl.constexpr(-1.9515295891e-4)
_SIGN_BIT: tl.constexpr = tl.constexpr(-(2**31))
_ROUND_MAGIC: tl.constexpr = tl.constexpr(12582912.0)
_PIO2_HI: tl.constexpr = tl.constexpr(1.5707963705062866)
_PIO2_LO: tl.constexpr = tl.constexpr(-4.371138828673793e-08)
_TWO_PI_SCALED: tl.constexpr = tl.constexpr(TWO_PI_F32 * UNIFORM_SCALE)
_PIO2_1: tl.constexpr = tl.constexpr(1.5703125)
_PIO2_2: tl.constexpr = tl.constexpr(4.837512969970703125e-4)
_PIO2_3: tl.constexpr = tl.constexpr(7.54978995489188216e-8)
_TWO_OVER_PI: tl.constexpr = tl.constexpr(0.6366197723675814)
# -2*ln(u1) = -2*ln(2) * log2(u1); below t = 1 - u1 < 1/32 the series 2t + t^2 + 2t^3/3 + t^4/2
# (relative truncation error < t^4/(5(1 - t)) = 2e-7 of r^2, 1e-7 of r, 2.5e-8 absolute)
# replaces the hardware log2, whose absolute error (~1e-7) would become a large relative
# error of r there.
_NEG_TWO_LN2: tl.constexpr = tl.constexpr(-1.3862943611198906)
_SERIES_BELOW: tl.constexpr = tl.constexpr(0.03125)
_TWO_THIRDS: tl.constexpr = tl.constexpr(0.6666666666666666)

# The exact transform's constants (:mod:`opreg_kernels.ops.philox.exact`, all float32 values).
_X_R0: tl.constexpr = tl.constexpr(_exact.LOG_POLY[0])
_X_R1: tl.constexpr = tl.constexpr(_exact.LOG_POLY[1])
_X_R2: tl.constexpr = tl.constexpr(_exact.LOG_POLY[2])
_X_R3: tl.constexpr = tl.constexpr(_exact.LOG_POLY[3])
_X_R4: tl.constexpr = tl.constexpr(_exact.LOG_POLY[4])
_X_R5: tl.constexpr = tl.constexpr(_exact.LOG_POLY[5])
_X_R6: tl.constexpr = tl.constexpr(_exact.LOG_POLY[6])
_X_R7: tl.constexpr = tl.constexpr(_exact.LOG_POLY[7])
_X_R8: tl.constexpr = tl.constexpr(_exact.LOG_POLY[8])
_X_R9: tl.constexpr = tl.constexpr(_exact.LOG_POLY[9])
_X_NEG_TWO_LN2: tl.constexpr = tl.constexpr(_exact.NEG_TWO_LN2)
_X_LOG_BIAS: tl.constexpr = tl.constexpr(_exact.LOG_BIAS)
_X_LOG_SQRT_HALF: tl.constexpr = tl.constexpr(_exact.LOG_SQRT_HALF)
_X_SIN1: tl.constexpr = tl.constexpr(_exact.SIN1)
_X_SIN2: tl.constexpr = tl.constexpr(_exact.SIN2)
_X_SIN3: tl.constexpr = tl.constexpr(_exact.SIN3)
_X_COS1: tl.constexpr = tl.constexpr(_exact.COS1)
_X_COS2: tl.constexpr = tl.constexpr(_exact.COS2)
_X_COS3: tl.constexpr = tl.constexpr(_exact.COS3)
_X_QUARTER_STEP: tl.constexpr = tl.constexpr(_exact.QUARTER_STEP)
_X_QUADRANT_SHIFT: tl.constexpr = tl.constexpr(_exact.QUADRANT_SHIFT)
_X_HALF_QUADRANT: tl.constexpr = tl.constexpr(_exact.HALF_QUADRANT)
_X_QUADRANT_MASK: tl.constexpr = tl.constexpr(_exact.QUADRANT_MASK)
_X_MIN_U1_SCALED: tl.constexpr = tl.constexpr(_exact.MIN_U1_F32 * 2.0**_exact.TURN_BITS)
_X_TURN_BITS: tl.constexpr = tl.constexpr(_exact.TURN_BITS)


@triton.jit
def _philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Ten Philox rounds on uint32 words; the key is bumped between rounds.

    Each 32x32->64-bit product compiles to one wide multiply (hi and lo words).
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
def _polar(r, theta, PTX_MATH: tl.constexpr):
    """``(r * cos(theta), r * sin(theta))`` for ``0 <= theta < 2*pi`` and ``r >= 0``.

    One reduction ``theta = x + q*pi/2`` with ``|x| <= pi/4``, one polynomial for sin(x), and
    cos(x) = sqrt(1 - sin(x)**2) (cos(x) >= 0.7 there). The quadrant costs no selects of
    signs: with ``x' = (-1)**q0 * x`` and ``r' = (-1)**q1 * r`` (q1 q0: q's two low bits),
    ``(cos, sin)(theta) * r = r' * (c, s)(x')`` for even q and ``r' * (s, c)(x')`` for odd q.
    """
    # Adding 1.5 * 2**23 rounds to an integer, kept in the low mantissa bits (the quadrant).
    k = theta * _TWO_OVER_PI + _ROUND_MAGIC
    q = k - _ROUND_MAGIC
    bits = k.to(tl.int32, bitcast=True)
    if PTX_MATH:  # fused: theta - q * PIO2_HI is exact, so two parts of pi/2 suffice
        x = tl.fma(q, -_PIO2_HI, theta)
        x = tl.fma(q, -_PIO2_LO, x)
    else:  # the interpreter does not fuse: parts with few bits keep each product exact
        x = theta - q * _PIO2_1
        x = x - q * _PIO2_2
        x = x - q * _PIO2_3
    # Adding q0 * 2**31 flips the sign bit: one integer multiply-add (FMA pipe), where a shift
    # and an xor would be two integer-pipe instructions.
    x = (x.to(tl.int32, bitcast=True) + (bits << 31)).to(tl.float32, bitcast=True)
    flip = (bits << 30) & _SIGN_BIT
    r = (r.to(tl.int32, bitcast=True) ^ flip).to(tl.float32, bitcast=True)
    z = x * x
    sin_x = x + x * z * (_S1 + z * (_S2 + z * _S3))
    # With PTX: times -1 is an fneg the fma takes as a negated operand (-s is 0 - s: one more).
    cos2 = tl.fma(sin_x * -1.0, sin_x, 1.0) if PTX_MATH else 1.0 - sin_x * sin_x
    cos_x = tl.sqrt(cos2)
    odd = (bits & 1) != 0
    return r * tl.where(odd, sin_x, cos_x), r * tl.where(odd, cos_x, sin_x)


@triton.jit
def _radius(word, PTX_MATH: tl.constexpr):
    """Box-Muller's ``r = sqrt(-2 * ln(max(u1, MIN_U1)))`` of the uniform ``u1`` of ``word``."""
    u1 = tl.maximum(_uniform(word), _MIN_U1)
    if PTX_MATH:
        log2_u1 = tl.inline_asm_elementwise(
            "lg2.approx.ftz.f32 $0, $1;", "=r,r", [u1], dtype=tl.float32, is_pure=True, pack=1
        )
        t = 1.0 - u1  # exact
        series = t * (2.0 + t * (1.0 + t * (_TWO_THIRDS + t * 0.5)))
        r2 = tl.where(t < _SERIES_BELOW, series, log2_u1 * _NEG_TWO_LN2)
    else:
        r2 = -2.0 * tl.log(u1)
    return tl.sqrt(r2)


@triton.jit
def _fma32(a, b, c, HW_FMA: tl.constexpr):
    """``exact.fma32``: ``a * b + c`` rounded once. ``HW_FMA``: the device's fused multiply-add;
    otherwise (Triton's interpreter, whose ``fma`` rounds twice) in float64, as the fallback."""
    if HW_FMA:
        return tl.fma(a, b, c)
    return (a.to(tl.float64) * b + c).to(tl.float32)


@triton.jit
def _exact_radius(word1, HW_FMA: tl.constexpr):
    """``exact.sqrt_rn(exact.neg_two_log(max(u1, MIN_U1)))``, operation for operation.

    ``u1 * 2**24`` (the integer ``word1 >> 8`` as float32) stands in for ``u1``: a power of two
    changes only the exponent ``k``, which is taken 24 lower (one multiply fewer).
    """
    x = tl.maximum((word1 >> 8).to(tl.float32), _X_MIN_U1_SCALED)
    ix = x.to(tl.int32, bitcast=True) + _X_LOG_BIAS
    k = (ix >> 23) - (0x7F + _X_TURN_BITS)
    f = ((ix & 0x7FFFFF) + _X_LOG_SQRT_HALF).to(tl.float32, bitcast=True) - 1.0
    s = _fma32(f, _X_R9, _X_R8, HW_FMA)
    s = _fma32(f, s, _X_R7, HW_FMA)
    s = _fma32(f, s, _X_R6, HW_FMA)
    s = _fma32(f, s, _X_R5, HW_FMA)
    s = _fma32(f, s, _X_R4, HW_FMA)
    s = _fma32(f, s, _X_R3, HW_FMA)
    s = _fma32(f, s, _X_R2, HW_FMA)
    s = _fma32(f, s, _X_R1, HW_FMA)
    log1p = _fma32(f, f * s, f * _X_R0, HW_FMA)
    return tl.sqrt_rn(_fma32(k.to(tl.float32), _X_NEG_TWO_LN2, log1p, HW_FMA))


@triton.jit
def _exact_turn(word2, HW_FMA: tl.constexpr):
    """``exact.cos_sin_of_turns`` of ``word2 >> 8`` before its last step: ``(a, b, sign)`` with
    ``cos = a ^ sign`` and ``sin = b ^ sign`` (``sign``: 0 or the sign bit, as int32)."""
    shifted = (word2 >> 8).to(tl.int32) + _X_HALF_QUADRANT
    q = shifted >> _X_QUADRANT_SHIFT
    j = (shifted & _X_QUADRANT_MASK) - _X_HALF_QUADRANT
    odd = (q & 1) != 0
    x = tl.where(odd, -j, j).to(tl.float32) * _X_QUARTER_STEP
    z = x * x
    sin_x = _fma32(_fma32(z, _X_SIN3, _X_SIN2, HW_FMA), z, _X_SIN1, HW_FMA)
    sin_x = _fma32(x * z, sin_x, x, HW_FMA)
    cos_x = _fma32(_fma32(_fma32(z, _X_COS3, _X_COS2, HW_FMA), z, _X_COS1, HW_FMA), z, -0.5, HW_FMA)
    cos_x = _fma32(cos_x, z, 1.0, HW_FMA)
    # (q & 2) << 30: the sign bit where q1 is set (Triton's -v would be 0 - v: +0.0 for 0.0).
    return tl.where(odd, sin_x, cos_x), tl.where(odd, cos_x, sin_x), (q & 2) << 30


@triton.jit
def _flip_sign(x, sign):
    return (x.to(tl.int32, bitcast=True) ^ sign).to(tl.float32, bitcast=True)


@triton.jit
def _box_muller_exact(word1, word2, HW_FMA: tl.constexpr):
    """``exact.box_muller_exact`` operation for operation (``HW_FMA``: see :func:`_fma32`).

    The one difference: the quadrant's sign goes on ``r`` (a sign-bit flip) instead of on
    cos and sin; a product's sign is the xor of its factors' signs, so the bits are the same.
    """
    a, b, sign = _exact_turn(word2, HW_FMA)
    r = _flip_sign(_exact_radius(word1, HW_FMA), sign)
    return r * a, r * b


@triton.jit
def _box_muller(word1, word2, FAST_SINCOS: tl.constexpr, PTX_MATH: tl.constexpr):
    """The two normals of the uniform pair of Philox words ``word1``, ``word2``."""
    r = _radius(word1, PTX_MATH)
    # u2 * TWO_PI in one product: u2 = (word2 >> 8) * 2**-24 is exact, and scaling by a power
    # of two does not change rounding, so this equals the fallback's float32 u2 * TWO_PI.
    theta = (word2 >> 8).to(tl.float32) * _TWO_PI_SCALED
    if FAST_SINCOS:
        return _polar(r, theta, PTX_MATH)
    return r * tl.cos(theta), r * tl.sin(theta)


@triton.jit
def _philox_values(
    seed,
    step,
    counter_lo,
    counter_hi,
    NORMAL: tl.constexpr,
    FAST_SINCOS: tl.constexpr,
    PTX_MATH: tl.constexpr,
    EXACT: tl.constexpr,
):
    """``(len(step), 4)`` outputs of Philox calls ``step`` of the row keyed by ``seed``."""
    k0 = (seed & 0xFFFFFFFF).to(tl.uint32)
    k1 = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)
    # counter_lo/hi arrive as int32 bit patterns (one compiled variant for every counter).
    c0 = step.to(tl.uint32) + counter_lo.to(tl.uint32, bitcast=True)
    c1 = tl.zeros_like(c0) + counter_hi.to(tl.uint32, bitcast=True)
    zero = tl.zeros_like(c0)
    w0, w1, w2, w3 = _philox4x32_10(c0, c1, zero, zero, k0, k1)
    if EXACT:
        v0, v1 = _box_muller_exact(w0, w1, PTX_MATH)
        v2, v3 = _box_muller_exact(w2, w3, PTX_MATH)
    elif NORMAL:
        v0, v1 = _box_muller(w0, w1, FAST_SINCOS, PTX_MATH)
        v2, v3 = _box_muller(w2, w3, FAST_SINCOS, PTX_MATH)
    else:
        v0 = _uniform(w0)
        v1 = _uniform(w1)
        v2 = _uniform(w2)
        v3 = _uniform(w3)
    # Interleave so that each thread holds (and stores) a call's 4 outputs contiguously.
    return tl.reshape(tl.join(tl.join(v0, v2), tl.join(v1, v3)), (step.shape[0], 4))


@triton.jit
def _store_calls(
    row_ptr,
    seed,
    step,
    active,
    n,
    counter_lo,
    counter_hi,
    NORMAL: tl.constexpr,
    FAST_SINCOS: tl.constexpr,
    PTX_MATH: tl.constexpr,
    EXACT: tl.constexpr,
    MASKED: tl.constexpr,
):
    """Store the outputs of Philox calls ``step`` at ``row_ptr + 4 * step`` (the row's start),
    with ``MASKED`` only where ``active`` and below the row's ``n`` values."""
    values = _philox_values(
        seed, step, counter_lo, counter_hi, NORMAL, FAST_SINCOS, PTX_MATH, EXACT
    )
    col = 4 * step[:, None] + tl.arange(0, 4)[None, :]
    if MASKED:
        tl.store(row_ptr + col, values, mask=active[:, None] & (col < n))
    else:
        tl.store(row_ptr + col, values)


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
    LOOP: tl.constexpr,
    FAST_SINCOS: tl.constexpr,
    PTX_MATH: tl.constexpr,
    EXACT: tl.constexpr = False,
    MASKED: tl.constexpr = True,
):
    """Program ``pid`` computes calls ``[chunk*BLOCK*LOOP, (chunk+1)*BLOCK*LOOP)`` of one row,
    ``BLOCK`` calls at a time (``chunks_per_row`` counts programs).

    Without ``MASKED``, the launcher guarantees whole chunks: ``n == 4 * calls_per_row`` and
    ``calls_per_row % (BLOCK * LOOP) == 0``.
    """
    pid = tl.program_id(0)
    row = pid // chunks_per_row
    chunk = pid - row * chunks_per_row
    seed = tl.load(seeds_ptr + row)
    row_ptr = out_ptr + (row.to(tl.int64) * n if WIDE else row * n)
    first = chunk.to(tl.int64) * LOOP if WIDE else chunk * LOOP
    for j in range(LOOP):
        start = (first + j) * BLOCK
        # A row's last program may hold fewer than LOOP blocks: no work past the row's end.
        if not MASKED or start < calls_per_row:
            step = start + tl.arange(0, BLOCK)
            _store_calls(
                row_ptr, seed, step, step < calls_per_row, n, counter_lo, counter_hi, NORMAL,
                FAST_SINCOS, PTX_MATH, EXACT, MASKED,
            )  # fmt: skip


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
    PTX_MATH: tl.constexpr,
    EXACT: tl.constexpr = False,
    MASKED: tl.constexpr = True,
):
    """Program ``pid`` computes flat calls ``[pid*BLOCK, (pid+1)*BLOCK)`` of all rows.

    Without ``MASKED``, the launcher guarantees whole blocks of whole rows: ``n == 4 *
    calls_per_row`` and ``total_calls % BLOCK == 0``.
    """
    pid = tl.program_id(0)
    if WIDE:
        call = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    else:
        call = pid * BLOCK + tl.arange(0, BLOCK)
    active = call < total_calls
    row = call // calls_per_row
    step = call - row * calls_per_row
    seed = tl.load(seeds_ptr + row, mask=active, other=0)
    _store_calls(
        out_ptr + row[:, None] * n, seed, step, active, n, counter_lo, counter_hi, NORMAL,
        FAST_SINCOS, PTX_MATH, EXACT, MASKED,
    )  # fmt: skip


def _ptx_device(device: torch.device) -> bool:
    """Whether kernels for ``device`` are compiled to PTX (NVIDIA CUDA, no interpreter)."""
    return device.type == "cuda" and torch.version.hip is None and not _INTERPRETED


_long_rows = FastLaunch(_philox_long_rows_kernel)
_short_rows = FastLaunch(_philox_short_rows_kernel)


def launch_rows(
    seeds: torch.Tensor,
    n: int,
    counter: int,
    *,
    normal: bool,
    block: int | None = None,
    num_warps: int | None = None,
    loop: int = DEFAULT_LOOP,
    fast_sincos: bool = DEFAULT_FAST_SINCOS,
    ptx_math: bool = DEFAULT_PTX_MATH,
    exact: bool = False,
) -> torch.Tensor:
    """Launch a Philox kernel for the flattened ``seeds``: returns ``(seeds.numel(), n)`` float32.

    No argument checks here (the op launchers do them); the keywords exist for tuning (see
    ``benchmarks/bench_kernels.py`` and ``benchmarks/probes/sweep_normal.py``; the ``DEFAULT_*``
    constants say what each does; ``block`` and ``num_warps`` left out: ``DEFAULT_*``, or the
    ``EXACT_*`` shapes with ``exact``). ``loop`` applies to long rows, ``fast_sincos`` to normals,
    ``ptx_math`` to normals where PTX runs (see :func:`_ptx_device`). Plain tensors (eager)
    take the fast launch; other tensors (a compiler-visible op traced by ``torch.compile``) the
    ``torch.library.wrap_triton`` launch. ``exact`` (normals only): the transform of
    :mod:`opreg_kernels.ops.philox.exact` (its fused multiply-adds on the device's ``fma``
    where PTX runs, in float64 under the interpreter), compiled with ``enable_fp_fusion=False``.
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
    # int32: long rows index up to rows * n + 4 * (chunks + 1) * loop * block; short rows
    # reach row (total_calls + block) // calls_per_row, i.e. output offsets below
    # 4 * (total + block + cpr).
    if exact and block is None:  # the exact kernel's own shapes (EXACT_* constants)
        long = calls_per_row >= EXACT_LONG_BLOCK
        block = EXACT_LONG_BLOCK if long else EXACT_SHORT_BLOCK
        if num_warps is None:
            num_warps = EXACT_LONG_NUM_WARPS if long else EXACT_SHORT_NUM_WARPS
    block = DEFAULT_BLOCK if block is None else block
    num_warps = DEFAULT_NUM_WARPS if num_warps is None else num_warps
    if calls_per_row >= block:
        # A program covers loop * block calls (no more than a row's whole blocks). Small outputs
        # (8 to 128 rows of 2^18 to 2^21 values, H200) took the same time with loop=1.
        loop = max(1, min(loop, calls_per_row // block))
        span = block * loop
        chunks = (calls_per_row + span - 1) // span
        wide = (rows + 1) * n + 4 * (chunks * span + span) >= _INT32_LIMIT
        launch, size, grid = _long_rows, chunks, rows * chunks
        whole_blocks = calls_per_row % span == 0
        loops = {"LOOP": loop}
    else:
        loop = 1
        wide = 4 * (total_calls + block + calls_per_row + 1) >= _INT32_LIMIT
        launch, size, grid = _short_rows, total_calls, (total_calls + block - 1) // block
        whole_blocks = total_calls % block == 0
        loops = {}
    ptx_math = ptx_math and normal and _ptx_device(seeds.device)
    masked = not (whole_blocks and n == 4 * calls_per_row)
    # In signature order: the fast launch passes them by position.
    constexprs = {
        "NORMAL": normal, "WIDE": wide, "BLOCK": block, **loops,
        "FAST_SINCOS": fast_sincos, "PTX_MATH": ptx_math, "EXACT": exact and normal,
        "MASKED": masked,
    }  # fmt: skip
    args = (seeds, out, n, calls_per_row, size, lo, hi)
    if type(seeds) is not torch.Tensor:
        if exact:  # (the exact op is opaque to the compiler: a tensor subclass, say)
            launch.fn[(grid,)](*args, **constexprs, num_warps=num_warps, **_EXACT_OPTIONS)
        else:  # traced for the compiler: the kernel goes into the graph
            torch.library.wrap_triton(launch.fn)[(grid,)](*args, **constexprs, num_warps=num_warps)
        return out
    device = seeds.get_device()
    key = (
        launch is _long_rows, device, seeds.data_ptr() & 15, out.data_ptr() & 15,
        int_spec(n), int_spec(calls_per_row), int_spec(size),
        normal, wide, block, num_warps, fast_sincos, ptx_math, masked, loop, exact,
    )  # fmt: skip
    launch(key, grid, device, args, num_warps, constexprs, _EXACT_OPTIONS if exact else None)
    return out


def launch_uniform(seeds: torch.Tensor, n: int, counter: int = 0) -> torch.Tensor:
    """Triton launcher of ``opreg::philox_uniform``."""
    check_philox_args(UNIFORM_NAME, seeds, n, counter)
    return launch_rows(seeds, n, counter, normal=False)


def launch_normal(seeds: torch.Tensor, n: int, counter: int = 0) -> torch.Tensor:
    """Triton launcher of ``opreg::philox_normal``."""
    check_philox_args(NORMAL_NAME, seeds, n, counter)
    return launch_rows(seeds, n, counter, normal=True)


def launch_normal_exact(seeds: torch.Tensor, n: int, counter: int = 0) -> torch.Tensor:
    """Triton launcher of ``opreg::philox_normal_exact``."""
    check_philox_args(_exact.EXACT_NAME, seeds, n, counter)
    return launch_rows(seeds, n, counter, normal=True, exact=True)


def launch_normal_exact_batched(seeds: torch.Tensor, n: int, counter: int = 0) -> torch.Tensor:
    """Triton launcher of the batched ``philox_normal_exact``: seeds ``(B, S)`` -> ``(B, S, n)``."""
    check_philox_args(_exact.EXACT_NAME, seeds, n, counter, seed_dims=2)
    return launch_rows(seeds, n, counter, normal=True, exact=True).reshape(*seeds.shape, n)


def launch_uniform_batched(seeds: torch.Tensor, n: int, counter: int = 0) -> torch.Tensor:
    """Triton launcher of the batched ``philox_uniform``: seeds ``(B, S)`` -> ``(B, S, n)``."""
    check_philox_args(UNIFORM_NAME, seeds, n, counter, seed_dims=2)
    return launch_rows(seeds, n, counter, normal=False).reshape(*seeds.shape, n)


def launch_normal_batched(seeds: torch.Tensor, n: int, counter: int = 0) -> torch.Tensor:
    """Triton launcher of the batched ``philox_normal``: seeds ``(B, S)`` -> ``(B, S, n)``."""
    check_philox_args(NORMAL_NAME, seeds, n, counter, seed_dims=2)
    return launch_rows(seeds, n, counter, normal=True).reshape(*seeds.shape, n)
