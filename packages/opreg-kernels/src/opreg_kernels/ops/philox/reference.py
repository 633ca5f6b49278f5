"""Philox4x32-10 in plain PyTorch: the bit-exact reference for the Triton kernels.

Unsigned 32-bit words are held in int64 tensors. The 32x32-bit products are
split into two 16x32-bit halves so no intermediate exceeds 2**49: the result is
exact on every device and never relies on signed-overflow behaviour.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "BOX_MULLER_MIN_U1",
    "NORMAL_NAME",
    "PHILOX_M0",
    "PHILOX_M1",
    "PHILOX_ROUNDS",
    "PHILOX_W0",
    "PHILOX_W1",
    "TWO_PI_F32",
    "UNIFORM_NAME",
    "UNIFORM_SCALE",
    "box_muller",
    "mulhilo32",
    "philox4x32",
    "philox_normal_rows",
    "philox_uniform_rows",
    "philox_words",
    "words_to_uniform",
]

#: How the ops' errors name them (the fallbacks, fakes and Triton launchers raise the same).
UNIFORM_NAME = "opreg: opreg::philox_uniform"
NORMAL_NAME = "opreg: opreg::philox_normal"

PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
PHILOX_ROUNDS = 10
MASK32 = 0xFFFFFFFF
#: A uniform is ``(word >> 8) * UNIFORM_SCALE``: 24 random bits, exact in float32, in [0, 1).
UNIFORM_SCALE = 2.0**-24
#: 2*pi rounded to float32, the constant both backends multiply by.
TWO_PI_F32 = float(torch.tensor(2.0 * math.pi, dtype=torch.float32).item())
#: Box-Muller clamps u1 from below so that log(u1) stays finite.
BOX_MULLER_MIN_U1 = 1e-10

Words = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def mulhilo32(m: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """High and low 32-bit words of ``m * x`` (32-bit constant ``m``, uint32 values ``x``)."""
    low = x * (m & 0xFFFF)  # < 2**48
    high = x * (m >> 16)  # < 2**48
    mid = low + ((high & 0xFFFF) << 16)  # < 2**49
    return (high >> 16) + (mid >> 32), mid & MASK32


def philox4x32(
    counter: Words, key: tuple[torch.Tensor, torch.Tensor], rounds: int = PHILOX_ROUNDS
) -> Words:
    """Apply ``rounds`` Philox4x32 rounds to ``counter`` under ``key`` (int64 words, broadcast)."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for i in range(rounds):
        if i:
            k0 = (k0 + PHILOX_W0) & MASK32
            k1 = (k1 + PHILOX_W1) & MASK32
        hi0, lo0 = mulhilo32(PHILOX_M0, c0)
        hi1, lo1 = mulhilo32(PHILOX_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def philox_words(seeds: torch.Tensor, calls: int, counter: int) -> torch.Tensor:
    """The uint32 words (int64 tensor of shape ``(len(seeds), 4 * calls)``) of each seed's stream.

    Call ``k`` of a row uses key ``(seed & 0xFFFFFFFF, seed >> 32 & 0xFFFFFFFF)``
    and counter ``((counter + k) mod 2**32, counter >> 32, 0, 0)``.
    """
    seeds = seeds.reshape(-1, 1)
    key = (seeds & MASK32, (seeds >> 32) & MASK32)
    steps = torch.arange(calls, dtype=torch.int64, device=seeds.device).reshape(1, -1)
    zero = torch.zeros((1, 1), dtype=torch.int64, device=seeds.device)
    c0 = ((counter & MASK32) + steps) & MASK32
    c1 = zero + ((counter >> 32) & MASK32)
    words = philox4x32((c0, c1, zero, zero), key)
    shape = (seeds.shape[0], calls)
    return torch.stack([w.expand(shape) for w in words], dim=-1).reshape(seeds.shape[0], 4 * calls)


def words_to_uniform(words: torch.Tensor) -> torch.Tensor:
    """Map uint32 words to float32 uniforms in [0, 1): ``(word >> 8) * 2**-24``."""
    return (words >> 8).to(torch.float32) * UNIFORM_SCALE


def box_muller(u1: torch.Tensor, u2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two standard normals per uniform pair: ``r*cos(2*pi*u2)``, ``r*sin(2*pi*u2)``."""
    r = torch.sqrt(-2.0 * torch.log(torch.clamp_min(u1, BOX_MULLER_MIN_U1)))
    theta = u2 * TWO_PI_F32
    return r * torch.cos(theta), r * torch.sin(theta)


def philox_uniform_rows(seeds: torch.Tensor, n: int, counter: int) -> torch.Tensor:
    """``(seeds.numel(), n)`` float32 uniforms, one row per seed."""
    calls = (n + 3) // 4
    return words_to_uniform(philox_words(seeds, calls, counter))[:, :n].contiguous()


def philox_normal_rows(seeds: torch.Tensor, n: int, counter: int) -> torch.Tensor:
    """``(seeds.numel(), n)`` float32 standard normals from consecutive uniform pairs."""
    rows, calls = seeds.numel(), (n + 3) // 4
    pairs = words_to_uniform(philox_words(seeds, calls, counter)).reshape(rows, 2 * calls, 2)
    z1, z2 = box_muller(pairs[..., 0], pairs[..., 1])
    return torch.stack([z1, z2], dim=-1).reshape(rows, 4 * calls)[:, :n].contiguous()
