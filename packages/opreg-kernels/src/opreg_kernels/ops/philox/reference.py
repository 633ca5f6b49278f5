"""Philox4x32-10 in plain PyTorch: the bit-exact reference for the Triton kernels.

Unsigned 32-bit words are held in int64 tensors. The 32x32-bit products are
split into two 16x32-bit halves so no intermediate exceeds 2**49: the result is
exact on every device and never relies on signed-overflow behaviour.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

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
    "word_blocks",
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


#: Philox calls per block of :func:`word_blocks`: its buffers (7 int64 tensors of this many
#: elements, 1.8 MB) stay near a core's L2 cache: ~15x faster than whole rows of 2**18 calls.
WORDS_BLOCK = 2**15


def _mulhilo32_into(
    m: int, x: torch.Tensor, hi: torch.Tensor, lo: torch.Tensor, t: torch.Tensor
) -> None:
    """:func:`mulhilo32` written into ``hi`` and ``lo`` (``t``: scratch), the same operations."""
    torch.mul(x, m & 0xFFFF, out=lo)  # < 2**48
    torch.mul(x, m >> 16, out=hi)  # < 2**48
    torch.bitwise_and(hi, 0xFFFF, out=t)
    t.bitwise_left_shift_(16).add_(lo)  # mid < 2**49
    hi.bitwise_right_shift_(16)
    torch.bitwise_right_shift(t, 32, out=lo)
    hi.add_(lo)
    torch.bitwise_and(t, MASK32, out=lo)


def _philox_block(key: tuple[torch.Tensor, torch.Tensor], c0: torch.Tensor, c1: int) -> Words:
    """:func:`philox4x32` (10 rounds) of counters ``(c0, c1, 0, 0)``, ``c0`` of shape
    ``(rows, steps)``, keys ``(rows, 1)``, in place in preallocated buffers."""
    shape = c0.shape
    words = [c0, torch.full(shape, c1, dtype=torch.int64, device=c0.device)]
    words += [torch.zeros(shape, dtype=torch.int64, device=c0.device) for _ in range(2)]
    hi0, lo0, hi1, lo1, t = (torch.empty_like(c0) for _ in range(5))
    k0, k1 = key
    for i in range(PHILOX_ROUNDS):
        if i:
            k0 = (k0 + PHILOX_W0) & MASK32
            k1 = (k1 + PHILOX_W1) & MASK32
        c0, c1_, c2, c3 = words
        _mulhilo32_into(PHILOX_M0, c0, hi0, lo0, t)
        _mulhilo32_into(PHILOX_M1, c2, hi1, lo1, t)
        hi1.bitwise_xor_(c1_).bitwise_xor_(k0)
        hi0.bitwise_xor_(c3).bitwise_xor_(k1)
        # (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0); the old words become the next buffers.
        words, (hi1, lo1, hi0, lo0) = [hi1, lo1, hi0, lo0], (c0, c1_, c2, c3)
    return words[0], words[1], words[2], words[3]


def word_blocks(
    seeds: torch.Tensor, calls: int, counter: int
) -> Iterator[tuple[slice, slice, Words]]:
    """:func:`philox_words` block by block: ``(rows, steps, (w0, w1, w2, w3))``, each word of
    shape ``(len(rows), len(steps))``; on CPU, blocks of about ``WORDS_BLOCK`` calls (several
    rows of few calls, or part of one long row), in row-major order; elsewhere one block."""
    seeds = seeds.reshape(-1, 1)
    rows = seeds.shape[0]
    k0, k1 = seeds & MASK32, (seeds >> 32) & MASK32
    low, high = counter & MASK32, (counter >> 32) & MASK32
    # Blocks keep CPU caches warm; elsewhere (the fallback on CUDA tensors) each operation
    # would be a kernel launch per block: one block.
    size = WORDS_BLOCK if seeds.device.type == "cpu" else max(rows * calls, 1)
    rows_per_block = max(1, size // max(calls, 1))
    steps_per_block = min(max(calls, 1), size)
    for r0 in range(0, rows, rows_per_block):
        r1 = min(r0 + rows_per_block, rows)
        for s0 in range(0, calls, steps_per_block):
            s1 = min(s0 + steps_per_block, calls)
            steps = torch.arange(s0, s1, dtype=torch.int64, device=seeds.device)
            c0 = ((steps + low) & MASK32).expand(r1 - r0, s1 - s0).contiguous()
            yield slice(r0, r1), slice(s0, s1), _philox_block((k0[r0:r1], k1[r0:r1]), c0, high)


def philox_words(seeds: torch.Tensor, calls: int, counter: int) -> torch.Tensor:
    """The uint32 words (int64 tensor of shape ``(len(seeds), 4 * calls)``) of each seed's stream.

    Call ``k`` of a row uses key ``(seed & 0xFFFFFFFF, seed >> 32 & 0xFFFFFFFF)``
    and counter ``((counter + k) mod 2**32, counter >> 32, 0, 0)``.
    """
    rows = seeds.numel()
    out = torch.empty((rows, calls, 4), dtype=torch.int64, device=seeds.device)
    for row_slice, step_slice, words in word_blocks(seeds, calls, counter):
        block = out[row_slice, step_slice]
        for j, word in enumerate(words):
            block[..., j] = word
    return out.reshape(rows, 4 * calls)


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
