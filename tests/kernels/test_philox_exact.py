"""philox_normal_exact: the same bits from the CPU fallback, Triton's interpreter and CUDA.

The fallback's transform (``opreg_kernels.ops.philox.exact``) is checked against float64 and
as a generator (moments, tails, KS) without Triton; the Triton kernel against the fallback
bit for bit, exhaustively for the transform's two halves (every possible ``u1`` and ``u2``)
and on whole rows (under the interpreter here; compiled on CUDA by ``run_gpu.sh tests``, and
over 2**26 values in tests/kernels/test_gpu.py). The compiled kernel's PTX is checked for
fused multiply-adds and approximate instructions without a GPU.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from opreg_kernels import philox_normal, philox_uniform
from opreg_kernels.ops.philox import exact, philox_normal_exact

SEEDS = [0, 1, -1, 2**31, 2**40 + 7, 2**63 - 1, -(2**63), 123456789]
# n: below one call, odd, a multiple of 16, long rows (several 1024-call chunks, partial
# last chunk); counters cross the low word's wrap and go past 2**32 and up to 2**63 - 1.
CASES = [(1, 0), (7, 3), (64, 0), (301, 2**32 - 5), (4100, 2**32 + 9), (8202, 2**62 + 1)]
CASES += [(5, 2**63 - 2)]
#: Fused multiply-adds per normal pair: the log's (one per coefficient), sin's 3 and cos's 4.
FMAS_PER_PAIR = len(exact.LOG_POLY) + 7


def bits(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.int32)


def seeds_on(device: torch.device | str = "cpu") -> torch.Tensor:
    return torch.tensor(SEEDS, dtype=torch.int64, device=device)


# -- the fallback: values, layout, accuracy, statistics (no Triton) -----------------------------
def test_exact_normals_are_the_exact_transform_of_the_uniform_pairs() -> None:
    seeds = seeds_on()
    u = philox_uniform(seeds, 64, 5)
    z1, z2 = exact.box_muller_exact(u[:, 0::2], u[:, 1::2])
    expected = torch.stack([z1, z2], dim=-1).reshape(len(SEEDS), 64)
    got = philox_normal_exact(seeds, 64, 5)
    assert got.dtype == torch.float32 and torch.equal(bits(got), bits(expected))
    # Same pairs as philox_normal: the two ops agree to float32 accuracy.
    assert (got - philox_normal(seeds, 64, 5)).abs().max().item() < 4e-6


def test_rows_prefixes_counter_jumps_and_independence() -> None:
    seeds = seeds_on()
    full = philox_normal_exact(seeds, 40, 2**32 - 3)
    for n in (0, 1, 2, 3, 5, 39):
        assert torch.equal(bits(philox_normal_exact(seeds, n, 2**32 - 3)), bits(full[:, :n]))
    assert torch.equal(bits(philox_normal_exact(seeds, 32, 2**32 - 1)), bits(full[:, 8:]))
    assert torch.equal(bits(philox_normal_exact(seeds[3:4], 40, 2**32 - 3)[0]), bits(full[3]))
    assert philox_normal_exact(seeds[:0], 3).shape == (0, 3)


def _float64_normals(u: torch.Tensor) -> torch.Tensor:
    """Box-Muller of float32 uniform pairs in float64, the angle reduced exactly."""
    u1, u2 = u[:, 0::2].double(), u[:, 1::2]
    r = torch.sqrt(-2.0 * torch.log(u1.clamp_min(exact.MIN_U1_F32)))
    k = (u2 * 2**24).to(torch.int64)
    quadrant, rest = k >> 22, (k & (2**22 - 1)).double()
    theta = quadrant.double() * (math.pi / 2) + rest * (math.pi / 2 * 2.0**-22)
    return torch.stack([r * torch.cos(theta), r * torch.sin(theta)], dim=-1).reshape(u.shape)


def test_error_against_float64_is_a_few_ulp() -> None:
    """benchmarks/exact_normal_ulp.py measures 2**26 values (3.45 ulp); here 2**19 (bound 4 ulp,
    plus 1e-15 for references near 0, where float64's sin/cos of the unreduced angle errs)."""
    seeds = torch.arange(2) * 7919
    u = philox_uniform(seeds, 2**18, 2**33)
    ref = _float64_normals(u)
    got = philox_normal_exact(seeds, 2**18, 2**33).double()
    spacing = ref.abs().float()
    spacing = (torch.nextafter(spacing, torch.full_like(spacing, math.inf)) - spacing).double()
    assert ((got - ref).abs() <= 4 * spacing + 1e-15).all()
    # The default op's float32 angle 2*pi*u2 (rounded) costs it accuracy near multiples of pi.
    default = philox_normal(seeds, 2**18, 2**33).double()
    assert (got - ref).abs().max() < (default - ref).abs().max()


def test_normal_tails() -> None:
    """Tails at 4 and 6 sigma (the moments, KS and pair tests philox_normal passes run on the
    exact op in test_philox.py's test_normal_statistics)."""
    scipy_stats = pytest.importorskip("scipy.stats")
    big = philox_normal_exact(torch.arange(8) + 2**40, 2**18).double()
    default = philox_normal(torch.arange(8) + 2**40, 2**18).double()
    expected = big.numel() * 2 * scipy_stats.norm.sf(4)  # 133 of 2**21, sd 11.5
    beyond4 = int((big.abs() > 4).sum())
    assert abs(beyond4 - expected) < 5 * math.sqrt(expected)
    # Same uniform pairs: the same tail, but for values within rounding of 4.0.
    assert abs(beyond4 - int((default.abs() > 4).sum())) <= 2
    # Beyond 6 sigma only u1 = 0 (clamped to 1e-10, r = 6.79) reaches; the same as the default.
    assert int((big.abs() > 6).sum()) == int((default.abs() > 6).sum())
    assert big.abs().max().item() <= math.sqrt(-2 * math.log(exact.MIN_U1_F32)) + 1e-6


def test_kurtosis_and_skew_of_a_large_sample() -> None:
    z = philox_normal_exact(torch.arange(32) * 3, 2**17, 2**35).double().flatten()
    m2 = z.var().item()
    assert abs((z**3).mean().item() / m2**1.5) < 0.01  # sd of the skew: sqrt(6/n) = 0.0012
    assert abs((z**4).mean().item() / m2**2 - 3) < 0.02  # sd of the kurtosis: 0.0024


def test_pytorch_float32_sqrt_is_not_correctly_rounded_so_the_fallback_avoids_it() -> None:
    """Why ``exact.sqrt_rn`` exists: ``torch.sqrt`` of float32 on CPU (SLEEF) differs from the
    correctly rounded root (numpy's, Triton's ``sqrt_rn``) on many of the radii's inputs."""
    j = torch.arange(1, 2**20, dtype=torch.int32) * 16
    r2 = exact.neg_two_log(j.to(torch.float32) * 2.0**-24)
    correctly_rounded = torch.from_numpy(__import__("numpy").sqrt(r2.numpy()))
    assert torch.equal(bits(exact.sqrt_rn(r2)), bits(correctly_rounded))
    if not torch.equal(bits(torch.sqrt(r2)), bits(correctly_rounded)):
        return  # this torch build: the mutant differs, as on the machines measured
    pytest.skip("this torch build's float32 sqrt is correctly rounded here")


@pytest.mark.parametrize(
    "bad",
    [
        (torch.tensor([1, 2], dtype=torch.int32), 4, 0, TypeError, "int64"),
        (torch.zeros(2, 2, dtype=torch.int64), 4, 0, ValueError, "1-D"),
        (torch.tensor([1]), -1, 0, ValueError, "n must be >= 0"),
        (torch.tensor([1]), 4, -1, ValueError, "counter"),
    ],
)
def test_bad_arguments_raise_errors_naming_the_op(bad: tuple[Any, ...]) -> None:
    seeds, n, counter, error, text = bad
    with pytest.raises(error, match=f"opreg::philox_normal_exact.*{text}"):
        philox_normal_exact(seeds, n, counter)


def test_vmap_and_compile_give_the_same_bits() -> None:
    seeds = torch.arange(24).reshape(2, 3, 4) * 7919
    out = torch.vmap(torch.vmap(philox_normal_exact, in_dims=(0, None)), in_dims=(1, None))(
        seeds, 6
    )
    expected = philox_normal_exact(seeds.transpose(0, 1).reshape(-1), 6).reshape(3, 2, 4, 6)
    assert torch.equal(bits(out), bits(expected))
    torch._dynamo.reset()
    compiled = torch.compile(lambda s: philox_normal_exact(s, 10, 3), fullgraph=True)
    assert torch.equal(bits(compiled(seeds[0, 0])), bits(philox_normal_exact(seeds[0, 0], 10, 3)))


# -- the Triton kernel against the fallback, bit for bit ----------------------------------------
@pytest.mark.needs_triton
def test_every_radius_and_angle_is_bit_identical(triton_device: torch.device) -> None:
    """The kernel's two halves for all 2**24 values of u1 and of u2: r, cos and sin are
    bit-identical to the fallback's, so every normal (their product) is too."""
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from exact_kernel import exact_halves
    finally:
        sys.path.remove(str(Path(__file__).parent))
    j = torch.arange(2**24, dtype=torch.int32)
    block = 2**16 if triton_device.type == "cpu" else 1024
    u1 = (j.to(torch.float32) * 2.0**-24).clamp_min(exact.MIN_U1_F32)
    expected = (exact.sqrt_rn(exact.neg_two_log(u1)), *exact.cos_sin_of_turns(j))
    # CUDA: the device's fma instruction (as the op runs there), and the float64 one of the
    # interpreter and the fallback; the interpreter: the float64 one.
    for hw_fma in (True, False) if triton_device.type == "cuda" else (False,):
        got = exact_halves((j << 8).to(triton_device), block, hw_fma)
        for name, g, e in zip(("r", "cos", "sin"), got, expected, strict=True):
            assert torch.equal(bits(g.cpu()), bits(e)), (name, hw_fma)


def _fma32_rounded_once(
    a: torch.Tensor, b: torch.Tensor | float, c: torch.Tensor | float
) -> torch.Tensor:
    """``a * b + c`` rounded once to float32, by another route than ``exact.fma32``: the float64
    sum rounded to odd (its exact error from TwoSum), then to float32 (53 >= 24 + 2 bits, so
    no double rounding)."""
    p = a.to(torch.float64) * b
    c64 = c.to(torch.float64) if isinstance(c, torch.Tensor) else torch.full_like(p, c)
    s = p + c64
    back = s - p
    err = (p - (s - back)) + (c64 - back)
    even = (s.view(torch.int64) & 1) == 0
    toward = torch.nextafter(s, torch.where(err > 0, math.inf, -math.inf))
    return torch.where((err != 0) & even, toward, s).to(torch.float32)


def test_every_fused_multiply_add_of_the_transform_rounds_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``exact.fma32`` (float64, rounded to float32) equals the single rounding of the GPU's
    ``fma`` for every fused multiply-add the transform performs, over all 2**24 inputs of each
    half: no sum lands on a float32 rounding midpoint that the exact sum is not."""
    a = torch.tensor([1.0 + 2.0**-12])
    # The detector sees a double rounding where there is one (1 + 2**-11 + 2**-24 + 2**-60):
    assert not torch.equal(exact.fma32(a, a, 2.0**-60), _fma32_rounded_once(a, a, 2.0**-60))
    differing: list[int] = []
    plain = exact.fma32

    def checked(a: torch.Tensor, b: torch.Tensor | float, c: torch.Tensor | float) -> torch.Tensor:
        got = plain(a, b, c)
        differing.append(int((bits(got) != bits(_fma32_rounded_once(a, b, c))).sum()))
        return got

    monkeypatch.setattr(exact, "fma32", checked)
    j = torch.arange(2**24, dtype=torch.int32)
    exact.neg_two_log((j.to(torch.float32) * 2.0**-24).clamp_min(exact.MIN_U1_F32))
    exact.cos_sin_of_turns(j)
    assert len(differing) == FMAS_PER_PAIR and not any(differing), differing


@pytest.mark.needs_triton
@pytest.mark.parametrize(("n", "counter"), CASES)
def test_rows_are_bit_identical_to_the_fallback(
    triton_device: torch.device, launches: dict[str, Any], n: int, counter: int
) -> None:
    seeds = seeds_on(triton_device)
    got = philox_normal_exact(seeds, n, counter)
    assert launches["philox"].calls == 1
    assert got.device.type == triton_device.type and got.shape == (len(SEEDS), n)
    assert torch.equal(bits(got.cpu()), bits(philox_normal_exact.fallback(seeds.cpu(), n, counter)))


@pytest.mark.needs_triton
def test_the_default_and_exact_kernels_keep_their_own_compiled_launches(
    triton_device: torch.device,
) -> None:
    """The same launch arguments and shapes, two kernels: each op's second call (on CUDA, the
    fast launch's cached kernel) still gives its own values."""
    seeds = seeds_on(triton_device)
    for _ in range(2):
        default = philox_normal(seeds, 4096, 5).cpu()
        exact_values = philox_normal_exact(seeds, 4096, 5).cpu()
        expected = philox_normal_exact.fallback(seeds.cpu(), 4096, 5)
        assert torch.equal(bits(exact_values), bits(expected))
        assert not torch.equal(bits(default), bits(exact_values))


@pytest.mark.needs_triton
@pytest.mark.parametrize("loop", [1, 4])
def test_launch_shapes_and_short_rows_are_bit_identical(
    triton_device: torch.device, loop: int
) -> None:
    """Long rows of whole and partial blocks (block 64, ``loop`` blocks a program), short rows
    (the flat grid), and the batched launcher under vmap."""
    from opreg_kernels.ops.philox import triton_kernels as kernels

    for rows, n, counter in [(3, 1024, 2**32 - 5), (3, 1321, 7), (64, 4, 2**40), (40, 9, 3)]:
        seeds = (torch.arange(rows) * 2654435761 - 2**50).to(triton_device)
        got = kernels.launch_rows(seeds, n, counter, normal=True, exact=True, block=64, loop=loop)
        expected = philox_normal_exact.fallback(seeds.cpu(), n, counter)
        assert torch.equal(bits(got.cpu()), bits(expected)), (rows, n, counter)
    seeds = (torch.arange(12) * 31).reshape(3, 4).to(triton_device)
    out = torch.vmap(philox_normal_exact, in_dims=(1, None, None))(seeds, 9, 2**33)
    expected = philox_normal_exact.fallback(seeds.t().reshape(-1).cpu(), 9, 2**33)
    assert torch.equal(bits(out.cpu()), bits(expected.reshape(4, 3, 9)))


def test_opcheck_on_the_sample_inputs() -> None:
    assert philox_normal_exact.sample_inputs is not None
    for sample in philox_normal_exact.sample_inputs(torch.device("cpu")):
        torch.library.opcheck(philox_normal_exact, sample.args, sample.kwargs)


# -- the compiled kernel's instructions (Triton's compiler and ptxas, no GPU) -------------------
_PTX_SCRIPT = r"""
import json, re
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from opreg_kernels.ops.philox import triton_kernels as philox

def ptx(kernel, constexprs, fusion):
    defaults = {p.name: p.default for p in kernel.params if p.is_constexpr and p.has_default}
    constexprs = {**defaults, **constexprs}
    names = [n for n in kernel.arg_names if n not in constexprs]
    types = ["*i64", "*fp32", "i32", "i32", "i32", "i32", "i32"]
    signature = {**dict(zip(names, types, strict=True)), **{k: "constexpr" for k in constexprs}}
    source = ASTSource(kernel, signature, constexprs=constexprs)
    options = {"num_warps": 4, "enable_fp_fusion": fusion}
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options).asm["ptx"]

common = {"NORMAL": True, "WIDE": False, "BLOCK": 1024, "FAST_SINCOS": True, "PTX_MATH": True,
          "EXACT": True, "MASKED": True}
found = {}
for name, kernel, loop in [("long", philox._philox_long_rows_kernel, {"LOOP": 4}),
                           ("short", philox._philox_short_rows_kernel, {})]:
    for fusion in (False, True):
        text = ptx(kernel, {**common, **loop}, fusion)
        found[f"{name} fusion={fusion}"] = {
            "fma": len(re.findall(r"\bfma\.rn\.f32", text)),
            "approx": len(re.findall(r"\.approx\b", text)),
            "div": len(re.findall(r"\bdiv\.\w+\.f32", text)),
            "sqrt.rn": len(re.findall(r"\bsqrt\.rn\.f32", text)),
            "f64": len(re.findall(r"\.f64\b", text)),
        }
print(json.dumps(found))
"""


@pytest.mark.needs_triton
def test_the_compiled_exact_kernel_has_only_its_own_fmas_and_no_approximate_math() -> None:
    """Compiled for sm_90 as the launcher compiles it: its fused multiply-adds are the
    transform's own (``tl.fma``: 17 a normal pair, 2 pairs a Philox call), none contracted from
    a multiply and an add (with contraction allowed, the same count: nothing is left to
    contract), no ``.approx`` instruction, no division, the correctly rounded ``sqrt.rn``, and
    no float64 (the interpreter's stand-in for ``fma``)."""
    unset = ("TRITON_INTERPRET", "OPREG_DISABLE_TRITON")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    proc = subprocess.run(
        [sys.executable, "-c", _PTX_SCRIPT], capture_output=True, text=True, env=env, timeout=600
    )
    if proc.returncode != 0 and "ptxas" in proc.stderr and "not found" in proc.stderr.lower():
        pytest.skip("Triton's bundled ptxas is missing")
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    per_call = 2 * FMAS_PER_PAIR  # two pairs a Philox call
    for name in ("long", "short"):
        exact_ptx, fused_ptx = found[f"{name} fusion=False"], found[f"{name} fusion=True"]
        assert exact_ptx["fma"] > 0 and exact_ptx["fma"] % per_call == 0, found
        assert fused_ptx == exact_ptx, found
        assert exact_ptx["approx"] == 0 and exact_ptx["div"] == 0 and exact_ptx["f64"] == 0, found
        assert exact_ptx["sqrt.rn"] > 0, found
