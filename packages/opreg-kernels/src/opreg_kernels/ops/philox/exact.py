"""Box-Muller written out as float32 adds, multiplies, fused multiply-adds and one square root.

``opreg::philox_normal_exact`` turns the same uniform pairs as ``philox_normal`` into normals
with a transform that every backend evaluates as the same IEEE operations in the same order:
adds, multiplies, fused multiply-adds (one rounding each) and a square root, all correctly
rounded in float32, integer and bit operations, and selects. No hardware or library
log/sin/cos. The PyTorch code here is the specification; the Triton kernel
(:mod:`opreg_kernels.ops.philox.triton_kernels`, ``EXACT``) repeats it operation for
operation, so CPU, Triton's interpreter and CUDA give the same bits.

- ``r = sqrt(-2 * ln(max(u1, MIN_U1)))``: ``u1 = 2**k * m`` with ``m`` in
  ``[sqrt(2)/2, sqrt(2))`` from the bits and ``f = m - 1`` (exact); ``-2 * ln(1 + f) = f * R(f)``
  with ``R`` a degree-9 polynomial (relative error 4.1e-9; Horner's rule in fused
  multiply-adds); then ``fma(k, -2 ln 2, that)``; ``sqrt`` correctly rounded.
- ``(cos, sin)(2*pi*u2)``: the 24-bit integer ``k = u2 * 2**24`` is reduced exactly: the
  quadrant ``q`` is the nearest multiple of ``2**22`` and ``x = j * (pi/2 * 2**-22)`` with
  ``|j| <= 2**21`` (one rounding, ``|x| <= pi/4``); Cephes ``sinf``/``cosf`` polynomials of
  ``x`` in fused multiply-adds; the quadrant swaps them and flips signs (exact).

Fused multiply-adds: the GPU's ``fma`` instruction; here (and under Triton's interpreter, whose
``fma`` rounds twice) the product of two float32 values is exact in float64, so the float64 sum
rounded to float32 is the fused result unless that sum lands exactly on a float32 rounding
midpoint that the exact sum is not (a double rounding). :func:`fma32` says where that happens;
tests/kernels/test_philox_exact.py checks every fused multiply-add of the transform for all
2**24 inputs of each half: none does.

Each line below is one float32 operation (each PyTorch op rounds once, :func:`fma32` once), in
the order the kernel performs them. Python float constants are float32 values, so PyTorch and
Triton convert them without rounding.
"""

from __future__ import annotations

import torch

from .reference import word_blocks, words_to_uniform

__all__ = [
    "EXACT_NAME",
    "LOG_POLY",
    "box_muller_exact",
    "cos_sin_of_turns",
    "fma32",
    "neg_two_log",
    "philox_normal_exact_rows",
    "sqrt_rn",
]

#: How the exact op's errors name it.
EXACT_NAME = "opreg: opreg::philox_normal_exact"

#: ``R(f) = -2 * ln(1 + f) / f`` on ``f`` in ``[sqrt(2)/2 - 1, sqrt(2) - 1]``: coefficients of
#: ``f**0`` to ``f**9`` (a minimax fit for relative error with ``f**0`` fixed at -2, rounded to
#: float32; hex in comments). Evaluated as ``-2*f + f * (f * S(f))``, ``S`` the polynomial of the
#: other coefficients: ``-2*f`` is exact and the rounding of ``S`` lands on a smaller term.
LOG_POLY = (
    -2.0,  # 0xc0000000
    0.9999997615814209,  # 0x3f7ffffc
    -0.6666665077209473,  # 0xbf2aaaa8
    0.5000317096710205,  # 0x3f000214
    -0.4000396728515625,  # 0xbeccd200
    0.3321812152862549,  # 0x3eaa13a8
    -0.28363314270973206,  # 0xbe91385d
    0.2648594081401825,  # 0x3e879ba7
    -0.258107453584671,  # 0xbe8426a9
    0.15245862305164337,  # 0x3e1c1e1d
)
#: -2 ln 2 in float32 (0xbfb17218; 0.05 ulp from the real value, so ``k`` times it in one fused
#: multiply-add needs no second part).
NEG_TWO_LN2 = -1.3862943649291992
#: Bits of float32 1.0 minus those of sqrt(2)/2: adding it moves mantissas >= sqrt(2) up an
#: exponent, so the mantissa lands in [sqrt(2)/2, sqrt(2)).
LOG_BIAS = 0x3F800000 - 0x3F3504F3
LOG_SQRT_HALF = 0x3F3504F3
# Cephes sinf / cosf on |x| <= pi/4.
SIN1 = -0.16666655242443085  # 0xbe2aaaa3
SIN2 = 0.008332161232829094  # 0x3c08839e
SIN3 = -0.00019515295571181923  # 0xb94ca1f9
COS1 = 0.04166664555668831  # 0x3d2aaaa5
COS2 = -0.0013887316454201937  # 0xbab6061a
COS3 = 2.44331567955669e-05  # 0x37ccf5ce
#: pi/2 * 2**-22 in float32 (0x34c90fdb): the angle of one step of ``k`` within a quadrant.
QUARTER_STEP = 3.7450703871400037e-07
#: ``BOX_MULLER_MIN_U1`` rounded to float32 (0x2edbe6ff), the clamp both backends apply.
MIN_U1_F32 = 1.000000013351432e-10
#: Uniforms carry 24 bits: ``k = u * 2**24`` is an integer below 2**24.
TURN_BITS = 24
QUADRANT_SHIFT = TURN_BITS - 2
HALF_QUADRANT = 1 << (QUADRANT_SHIFT - 1)
QUADRANT_MASK = (1 << QUADRANT_SHIFT) - 1


def fma32(a: torch.Tensor, b: torch.Tensor | float, c: torch.Tensor | float) -> torch.Tensor:
    """``a * b + c`` of float32 values, rounded once to float32 (see the module's docstring).

    ``a`` may be a float64 tensor that holds float32 values (it is not converted again).
    """
    return (a.to(torch.float64) * b + c).to(torch.float32)


def neg_two_log(u1: torch.Tensor) -> torch.Tensor:
    """``-2 * ln(u1)`` of normal positive float32 ``u1``."""
    ix = u1.view(torch.int32) + LOG_BIAS
    k = (ix >> 23) - 0x7F
    f = ((ix & 0x7FFFFF) + LOG_SQRT_HALF).view(torch.float32) - 1.0
    f64 = f.to(torch.float64)  # the same float32 values: each fma32 below reads them
    s = fma32(f64, LOG_POLY[-1], LOG_POLY[-2])
    for coefficient in reversed(LOG_POLY[1:-2]):
        s = fma32(f64, s, coefficient)
    log1p = fma32(f64, f * s, f * LOG_POLY[0])  # -2 * ln(1 + f)
    return fma32(k.to(torch.float32), NEG_TWO_LN2, log1p)


def cos_sin_of_turns(turns: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of ``2*pi*turns * 2**-24`` for integers ``0 <= turns < 2**24``.

    ``theta = q*pi/2 + x``; with ``x' = (-1)**q0 * x`` (``q0``, ``q1``: the low bits of ``q``),
    ``(cos, sin)(theta) = (-1)**q1 * (c, s)(x')`` for even ``q`` and ``(-1)**q1 * (s, c)(x')``
    for odd ``q``: the kernel flips the sign of ``r`` instead, which gives the same bits.
    """
    shifted = turns + HALF_QUADRANT
    q = shifted >> QUADRANT_SHIFT  # 4 (quadrant 0) for turns within half a quadrant of 2**24
    j = (shifted & QUADRANT_MASK) - HALF_QUADRANT
    odd = (q & 1) != 0
    x = torch.where(odd, -j, j).to(torch.float32) * QUARTER_STEP
    z = x * x
    z64 = z.to(torch.float64)
    sin_x = fma32(x * z, fma32(fma32(z64, SIN3, SIN2), z64, SIN1), x)
    cos_x = fma32(fma32(fma32(z64, COS3, COS2), z64, COS1), z64, -0.5)
    cos_x = fma32(cos_x, z64, 1.0)
    cos_t = torch.where(odd, sin_x, cos_x)
    sin_t = torch.where(odd, cos_x, sin_x)
    negative = (q & 2) != 0
    return torch.where(negative, -cos_t, cos_t), torch.where(negative, -sin_t, sin_t)


def sqrt_rn(x: torch.Tensor) -> torch.Tensor:
    """The correctly rounded float32 square root (``tl.sqrt_rn``, numpy's float32 sqrt).

    ``torch.sqrt`` of float32 on CPU is not (SLEEF, 0.5001 ulp: 15 % of random inputs differ
    in the last bit). The float64 root, within 0.5001 ulp of float64, rounds to the correctly
    rounded float32 one: a float32's root is never within 2**-51 (relative) of a float32
    rounding midpoint. Checked for every input the op produces (tests/kernels/test_philox_exact.py).
    """
    return torch.sqrt(x.to(torch.float64)).to(torch.float32)


def box_muller_exact(u1: torch.Tensor, u2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(r*cos(2*pi*u2), r*sin(2*pi*u2))``, ``r = sqrt(-2*ln(max(u1, MIN_U1)))``, float32.

    ``u1``, ``u2``: float32 uniforms of the Philox layout (multiples of 2**-24 in [0, 1)).
    """
    r = sqrt_rn(neg_two_log(torch.clamp_min(u1, MIN_U1_F32)))
    turns = (u2 * float(1 << TURN_BITS)).to(torch.int32)
    cos_t, sin_t = cos_sin_of_turns(turns)
    return r * cos_t, r * sin_t


def philox_normal_exact_rows(seeds: torch.Tensor, n: int, counter: int) -> torch.Tensor:
    """``(seeds.numel(), n)`` float32 normals: :func:`box_muller_exact` of the uniform pairs
    ``(w0, w1)`` and ``(w2, w3)`` of each Philox call.

    Block by block (in cache): ``-2 ln(u1)`` and ``(cos, sin)``; then one square root and
    one product over the whole output (``r * cos`` as ``cos * r``: IEEE products commute).
    One square root call, not one per block: ``torch.sqrt`` with several CPU threads costs
    milliseconds per call whatever the size on a busy host (torch 2.13).
    """
    rows, calls = seeds.numel(), (n + 3) // 4
    out = torch.empty((rows, calls, 2, 2), dtype=torch.float32, device=seeds.device)
    r2 = torch.empty((rows, calls, 2, 1), dtype=torch.float32, device=seeds.device)
    for row_slice, step_slice, words in word_blocks(seeds, calls, counter):
        w0, w1, w2, w3 = (words_to_uniform(w) for w in words)
        block, r2_block = out[row_slice, step_slice], r2[row_slice, step_slice]
        for j, (u1, u2) in enumerate(((w0, w1), (w2, w3))):
            r2_block[..., j, 0] = neg_two_log(torch.clamp_min(u1, MIN_U1_F32))
            block[..., j, 0], block[..., j, 1] = cos_sin_of_turns(
                (u2 * float(1 << TURN_BITS)).to(torch.int32)
            )
    out.mul_(sqrt_rn(r2))
    flat = out.reshape(rows, 4 * calls)
    return flat if n == 4 * calls else flat[:, :n].contiguous()
