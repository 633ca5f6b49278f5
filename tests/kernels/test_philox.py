"""philox_uniform / philox_normal: the Philox4x32-10 reference, the bit layout, statistics,
argument errors, vmap and compile, on the PyTorch fallback (no Triton needed)."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
import torch

from opreg_kernels import philox_normal, philox_normal_exact, philox_uniform
from opreg_kernels.ops.philox.reference import (
    MASK32,
    TWO_PI_F32,
    mulhilo32,
    philox4x32,
)

# Random123 kat_vectors, philox4x32: (rounds, counter words, key words, expected output words).
KAT = [
    (10, (0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    (10, (MASK32,) * 4, (MASK32,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        10,
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
    (7, (0, 0, 0, 0), (0, 0), (0x5F6FB709, 0x0D893F64, 0x4F121F81, 0x4F730A48)),
    (7, (MASK32,) * 4, (MASK32,) * 2, (0x5207DDC2, 0x45165E59, 0x4D8EE751, 0x8C52F662)),
    (
        7,
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0x4DFCCABA, 0x190A87F0, 0xC47362BA, 0xB6B5242A),
    ),
]


def py_philox(counter: tuple[int, ...], key: tuple[int, int], rounds: int = 10) -> list[int]:
    """Philox4x32 on Python ints, written from the Random123 paper (independent of the package)."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for i in range(rounds):
        if i:
            k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & MASK32, (p0 >> 32) ^ c3 ^ k1, p0 & MASK32
    return [c0, c1, c2, c3]


def py_uniform_row(seed: int, n: int, counter: int) -> list[float]:
    """The documented layout: call k uses counter words ((counter+k) % 2**32, counter>>32, 0, 0)."""
    key = (seed & MASK32, (seed >> 32) & MASK32)
    words: list[int] = []
    for k in range((n + 3) // 4):
        words += py_philox(((counter + k) & MASK32, counter >> 32, 0, 0), key)
    return [(w >> 8) * 2.0**-24 for w in words[:n]]


@pytest.mark.parametrize(("rounds", "counter", "key", "expected"), KAT)
def test_round_function_matches_random123_known_answers(
    rounds: int, counter: tuple[int, ...], key: tuple[int, int], expected: tuple[int, ...]
) -> None:
    words = philox4x32(
        tuple(torch.tensor([c]) for c in counter),  # type: ignore[arg-type]
        (torch.tensor([key[0]]), torch.tensor([key[1]])),
        rounds,
    )
    assert [int(w) for w in words] == list(expected)
    assert py_philox(counter, key, rounds) == list(expected)


def test_mulhilo_is_exact_for_full_range_words() -> None:
    rng = random.Random(1)
    xs = [0, 1, 2, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, MASK32] + [
        rng.getrandbits(32) for _ in range(2000)
    ]
    x = torch.tensor(xs, dtype=torch.int64)
    for m in (0xD2511F53, 0xCD9E8D57, MASK32, 1):
        hi, lo = mulhilo32(m, x)
        assert hi.tolist() == [(m * v) >> 32 for v in xs]
        assert lo.tolist() == [(m * v) & MASK32 for v in xs]


@pytest.mark.parametrize(
    ("seed", "n", "counter"),
    [
        (0, 8, 0),
        (1, 7, 3),
        (-1, 5, 0),  # key words of a negative seed are its two's complement halves
        (2**63 - 1, 9, 2**40 + 5),
        (-(2**63), 4, 0),
        (123456789, 12, 2**32 - 2),  # the low counter word wraps without a carry into c1
    ],
)
def test_uniform_layout_matches_the_documented_spec(seed: int, n: int, counter: int) -> None:
    got = philox_uniform(torch.tensor([seed]), n, counter)
    assert got.dtype == torch.float32
    assert got.shape == (1, n)
    assert got[0].tolist() == py_uniform_row(seed, n, counter)


def test_known_answer_as_uniforms() -> None:
    expected = [w >> 8 for w in KAT[0][3]]
    got = philox_uniform(torch.tensor([0]), 4)
    assert (got[0] * 2**24).to(torch.int64).tolist() == expected


def test_counter_jumps_ahead_by_four_values() -> None:
    seeds = torch.tensor([3, 99, -5])
    base = philox_uniform(seeds, 40, 10)
    assert torch.equal(philox_uniform(seeds, 36, 11), base[:, 4:])
    assert torch.equal(philox_uniform(seeds, 20, 15), base[:, 20:])
    normal = philox_normal(seeds, 40, 10)
    assert torch.equal(philox_normal(seeds, 32, 12), normal[:, 8:])


def test_rows_are_prefixes_and_independent_of_other_rows() -> None:
    seeds = torch.tensor([7, 8, 9, 2**35])
    full = philox_uniform(seeds, 16)
    for n in (0, 1, 2, 3, 5, 15):
        assert torch.equal(philox_uniform(seeds, n), full[:, :n])
        assert torch.equal(philox_normal(seeds, n), philox_normal(seeds, 16)[:, :n])
    for i in range(len(seeds)):
        assert torch.equal(philox_uniform(seeds[i : i + 1], 16)[0], full[i])
    assert philox_uniform(seeds, 0).shape == (4, 0)
    assert philox_uniform(seeds[:0], 3).shape == (0, 3)


def test_normals_are_box_muller_of_uniform_pairs() -> None:
    seeds = torch.tensor([0, 42, -7])
    u = philox_uniform(seeds, 64).double()
    u1, u2 = u[:, 0::2], u[:, 1::2]
    r = torch.sqrt(-2 * torch.log(u1.clamp_min(1e-10)))
    theta = u2 * TWO_PI_F32
    expected = torch.stack([r * torch.cos(theta), r * torch.sin(theta)], dim=-1).reshape(3, 64)
    got = philox_normal(seeds, 64)
    # float32 evaluation of the same formula: a few ulps of the result.
    torch.testing.assert_close(got.double(), expected, rtol=1e-6, atol=2e-6)


def test_uniform_statistics() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    u = philox_uniform(torch.arange(64), 4096).double()
    assert u.min().item() >= 0.0 and u.max().item() < 1.0
    assert abs(u.mean().item() - 0.5) < 0.002  # sd of the mean: 0.0011
    assert abs(u.var().item() - 1 / 12) < 0.001
    assert scipy_stats.kstest(u.flatten().numpy(), "uniform").pvalue > 1e-3
    # Neighbouring seeds and neighbouring values are uncorrelated.
    corr = torch.corrcoef(torch.stack([u[0], u[1], u[0].roll(1)]))
    assert corr[0, 1].abs() < 0.05 and corr[0, 2].abs() < 0.05


@pytest.mark.parametrize("normal", [philox_normal, philox_normal_exact], ids=["default", "exact"])
def test_normal_statistics(normal: Any) -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    z = normal(torch.arange(64) * 1000, 4096, 7).double()
    assert torch.isfinite(z).all()
    assert abs(z.mean().item()) < 0.005  # sd of the mean: 0.0020
    assert abs(z.var().item() - 1) < 0.01
    assert scipy_stats.kstest(z.flatten().numpy(), "norm").pvalue > 1e-3
    # The two normals of a Box-Muller pair are uncorrelated.
    assert (
        torch.corrcoef(torch.stack([z[:, 0::2].flatten(), z[:, 1::2].flatten()]))[0, 1].abs() < 0.01
    )


@pytest.mark.parametrize("op", [philox_uniform, philox_normal], ids=["uniform", "normal"])
def test_bad_arguments_raise_errors_naming_the_op(op: torch._ops.OpOverload) -> None:
    name = op.qualname  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match=f"{name}.*int64"):
        op(torch.tensor([1, 2], dtype=torch.int32), 4)
    with pytest.raises(ValueError, match=f"{name}.*1-D"):
        op(torch.zeros(2, 2, dtype=torch.int64), 4)
    with pytest.raises(ValueError, match=f"{name}.*n must be >= 0"):
        op(torch.tensor([1]), -1)
    with pytest.raises(ValueError, match=f"{name}.*counter"):
        op(torch.tensor([1]), 4, -1)
    with pytest.raises(ValueError, match=f"{name}.*1-D"):  # a 2-D sample under vmap
        torch.vmap(op, in_dims=(0, None))(torch.zeros(3, 2, 2, dtype=torch.int64), 4)


@pytest.mark.parametrize("op", [philox_uniform, philox_normal], ids=["uniform", "normal"])
def test_vmap_runs_the_batched_rule_and_matches_a_loop(op: torch._ops.OpOverload) -> None:
    seeds = torch.arange(24).reshape(2, 3, 4) * 7919
    stats = op.vmap_stats  # type: ignore[attr-defined]
    stats.reset()
    out = torch.vmap(op, in_dims=(0, None, None))(seeds[0], 5, 2)
    assert torch.equal(out, torch.stack([op(s, 5, 2) for s in seeds[0]]))
    nested = torch.vmap(torch.vmap(op, in_dims=(0, None)), in_dims=(1, None))(seeds, 6)
    assert nested.shape == (3, 2, 4, 6)
    assert torch.equal(nested, op(seeds.transpose(0, 1).reshape(-1), 6).reshape(3, 2, 4, 6))
    assert stats.fast == 2 and stats.nested == 1 and stats.loop == 0


@pytest.mark.parametrize("op", [philox_uniform, philox_normal], ids=["uniform", "normal"])
def test_torch_compile_fullgraph_matches_eager(op: torch._ops.OpOverload) -> None:
    torch._dynamo.reset()

    def f(seeds: torch.Tensor) -> torch.Tensor:
        return op(seeds, 10, 3) * 2

    seeds = torch.tensor([1, 2, 3])
    assert torch.equal(torch.compile(f, fullgraph=True)(seeds), f(seeds))


def test_outputs_do_not_require_grad() -> None:
    out = philox_normal(torch.tensor([1]), 4)
    assert not out.requires_grad
    assert math.isfinite(out.sum().item())
