"""The Triton kernels against their PyTorch fallbacks, element for element.

Runs on CPU tensors under Triton's interpreter (TRITON_INTERPRET=1, with "cpu"
added to the ops' Triton device types) and, on a GPU machine, on CUDA.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from opreg_kernels import fused_add, philox_normal, philox_uniform

pytestmark = pytest.mark.needs_triton

#: Largest |Triton - fallback| of philox_normal seen in these tests must stay below this.
#: Measured: 4.8e-7 under the interpreter (numpy float32 vs PyTorch's vectorised CPU math).
NORMAL_TOLERANCE = 4e-6

SEEDS = [0, 1, -1, 2**31, 2**40 + 7, 2**63 - 1, -(2**63), 123456789]


def seeds_on(device: torch.device, count: int | None = None) -> torch.Tensor:
    values = (
        SEEDS
        if count is None
        else [(s * 2654435761 + i) % 2**62 for i, s in enumerate(SEEDS * count)][:count]
    )
    return torch.tensor(values, dtype=torch.int64, device=device)


# n values: below one call, odd, a multiple of 16, and rows long enough (>= DEFAULT_BLOCK =
# 1024 calls) for the long-row kernel with several chunks; counters cross the low-word wrap.
PHILOX_CASES = [(1, 0), (7, 3), (64, 0), (301, 2**32 - 5), (4100, 7), (8200, 2**62 + 1)]


@pytest.mark.parametrize(("n", "counter"), PHILOX_CASES)
def test_philox_uniform_is_bit_identical_to_the_fallback(
    triton_device: torch.device, launches: dict[str, Any], n: int, counter: int
) -> None:
    seeds = seeds_on(triton_device)
    got = philox_uniform(seeds, n, counter)
    assert launches["philox"].calls == 1
    assert got.device.type == triton_device.type and got.shape == (len(SEEDS), n)
    assert torch.equal(got.cpu(), philox_uniform.fallback(seeds.cpu(), n, counter))


@pytest.mark.parametrize(("n", "counter"), PHILOX_CASES)
def test_philox_normal_matches_the_fallback(
    triton_device: torch.device, launches: dict[str, Any], n: int, counter: int
) -> None:
    seeds = seeds_on(triton_device)
    got = philox_normal(seeds, n, counter)
    assert launches["philox"].calls == 1
    expected = philox_normal.fallback(seeds.cpu(), n, counter)
    error = (got.cpu() - expected).abs().max().item() if n else 0.0
    print(f"philox_normal n={n}: max |triton - fallback| = {error:.3g}")
    assert error <= NORMAL_TOLERANCE
    assert torch.isfinite(got).all()


def test_philox_many_short_rows(triton_device: torch.device, launches: dict[str, Any]) -> None:
    seeds = seeds_on(triton_device, 3000)  # the flat kernel: many rows of one or two calls
    for n in (3, 8):
        assert torch.equal(philox_uniform(seeds, n).cpu(), philox_uniform.fallback(seeds.cpu(), n))
    assert launches["philox"].calls == 2


def test_philox_empty_outputs(triton_device: torch.device) -> None:
    seeds = seeds_on(triton_device)
    assert philox_uniform(seeds, 0).shape == (len(SEEDS), 0)
    assert philox_normal(seeds[:0], 5).shape == (0, 5)


def test_philox_vmap_runs_the_batched_triton_launcher(
    triton_device: torch.device, launches: dict[str, Any]
) -> None:
    seeds = seeds_on(triton_device, 24).reshape(2, 3, 4)
    stats = philox_uniform.vmap_stats
    stats.reset()
    out = torch.vmap(torch.vmap(philox_uniform, in_dims=(0, None, None)), in_dims=(0, None, None))(
        seeds, 9, 5
    )
    assert launches["philox"].calls == 1 and stats.nested == 1
    expected = philox_uniform.fallback(seeds.reshape(-1).cpu(), 9, 5).reshape(2, 3, 4, 9)
    assert torch.equal(out.cpu(), expected)
    normal = torch.vmap(philox_normal, in_dims=(1, None))(seeds[0], 6)
    assert launches["philox"].calls == 2
    expected_normal = philox_normal.fallback(seeds[0].t().reshape(-1).cpu(), 6).reshape(4, 3, 6)
    assert (normal.cpu() - expected_normal).abs().max().item() <= NORMAL_TOLERANCE


# (rows, n, counter) at block 64 (256 values a block): long rows of whole blocks (4 per row),
# of whole blocks but a partial call (n % 4 != 0), of a partial fourth block (3 whole), of 5
# blocks and a partial sixth (a last program with fewer than 4 blocks: some skipped); short
# rows of a partial block and of whole blocks; counters cross the low word's wrap.
LOOP_CASES = [
    (8, 1024, 2**32 - 5), (8, 1022, 7), (8, 1000, 7), (3, 1321, 2**32 - 5), (8, 9, 3),
    (64, 4, 2**40),
]  # fmt: skip


@pytest.mark.parametrize("loop", [1, 2, 4])
def test_philox_loops_and_partial_blocks_match_the_fallback(
    triton_device: torch.device, loop: int
) -> None:
    """Long-row programs of ``loop`` blocks (clamped to a row's whole blocks) and the short-row
    grid, with masked (partial) and unmasked (whole) stores: normals within NORMAL_TOLERANCE of
    the fallback, uniforms bit for bit."""
    from opreg_kernels.ops.philox import triton_kernels as philox_kernels

    for case in LOOP_CASES:
        rows, n, counter = case
        seeds = seeds_on(triton_device, rows)
        normal = philox_kernels.launch_rows(seeds, n, counter, normal=True, block=64, loop=loop)
        expected = philox_normal.fallback(seeds.cpu(), n, counter)
        assert (normal.cpu() - expected).abs().max().item() <= NORMAL_TOLERANCE, case
        uniform = philox_kernels.launch_rows(seeds, n, counter, normal=False, block=64, loop=loop)
        assert torch.equal(uniform.cpu(), philox_uniform.fallback(seeds.cpu(), n, counter)), case


def test_philox_bad_arguments_fail_the_same_way(triton_device: torch.device) -> None:
    with pytest.raises(TypeError, match=r"opreg::philox_uniform.*int64"):
        philox_uniform(torch.tensor([1], dtype=torch.int32, device=triton_device), 4)
    with pytest.raises(ValueError, match=r"opreg::philox_normal.*n must be >= 0"):
        philox_normal(torch.tensor([1], device=triton_device), -2)


ADD_CASES = [
    ((1,), torch.float32),
    ((1000,), torch.float32),
    ((33, 129), torch.float16),
    ((4, 5, 6), torch.bfloat16),
    ((257,), torch.float64),
    ((100,), torch.int32),
    ((9000,), torch.int64),  # more than one program of 4096
]


@pytest.mark.parametrize(("shape", "dtype"), ADD_CASES, ids=str)
def test_fused_add_is_bit_identical_to_torch_add(
    triton_device: torch.device,
    launches: dict[str, Any],
    shape: tuple[int, ...],
    dtype: torch.dtype,
) -> None:
    if dtype == torch.bfloat16 and triton_device.type == "cpu":
        # Triton's interpreter computes on bfloat16 bit patterns as integers (a documented
        # interpreter limitation; triton-lang/triton#4972). Compiled kernels are tested on CUDA.
        pytest.skip("Triton's interpreter does not support bfloat16 arithmetic")
    x = (torch.randn(shape, device=triton_device) * 1000).to(dtype)
    y = (torch.randn(shape, device=triton_device) * 1000).to(dtype)
    out = fused_add(x, y)
    assert launches["add"].calls == 1
    assert out.dtype == dtype and out.is_contiguous()
    assert torch.equal(out, x + y)


def test_fused_add_non_contiguous_empty_and_scalar(
    triton_device: torch.device, launches: dict[str, Any]
) -> None:
    x = torch.randn(64, 48, device=triton_device)
    assert torch.equal(fused_add(x.t(), x.t()), x.t() + x.t())
    assert torch.equal(fused_add(x[:, ::3], x[:, 1::3]), x[:, ::3] + x[:, 1::3])
    empty = torch.empty(0, 3, device=triton_device)
    assert fused_add(empty, empty).shape == (0, 3)
    scalar = torch.tensor(2.5, device=triton_device)
    assert fused_add(scalar, scalar).item() == 5.0
    assert launches["add"].calls == 4


def test_fused_add_backward_and_vmap_on_the_triton_kernel(
    triton_device: torch.device, launches: dict[str, Any]
) -> None:
    x = torch.randn(5, 6, device=triton_device, requires_grad=True)
    y = torch.randn(5, 6, device=triton_device, requires_grad=True)
    out = fused_add(x, y)
    assert torch.equal(out, x + y)
    out.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x)) and torch.equal(y.grad, torch.ones_like(y))  # type: ignore[arg-type]
    calls = launches["add"].calls
    batched = torch.vmap(fused_add, in_dims=(0, None))(x.detach(), y.detach()[0])
    assert launches["add"].calls == calls + 1  # the batched launcher, not a per-sample loop
    assert torch.equal(batched, x.detach() + y.detach()[0])


@pytest.mark.parametrize("ptx_math", [False, True], ids=["portable", "ptx"])
def test_box_muller_radius_for_every_uniform(triton_device: torch.device, ptx_math: bool) -> None:
    """r = sqrt(-2 ln u1) for all 2**24 uniforms u1 (a subset under the interpreter), against
    float64: the hardware log2 with its 4-term series near u1 = 1 (on CUDA; truncation below
    2.5e-8 of r) and libdevice's log."""
    if ptx_math and triton_device.type != "cuda":
        pytest.skip("PTX math runs on NVIDIA GPUs only")
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from radius_kernel import radius
    finally:
        sys.path.remove(str(Path(__file__).parent))
    j = torch.arange(2**24, dtype=torch.int64)
    if triton_device.type != "cuda":  # every 61st, and every value near both ends
        j = torch.cat([j[::61], j[:4096], j[-(2**16) :]])
        j = j[: j.numel() // 4096 * 4096]
    words = (j << 8).to(torch.int32)  # bit patterns of uint32 words
    got = radius(words.to(triton_device), ptx_math).cpu().double()
    u1 = (j.double() * 2.0**-24).clamp_min(1e-10)
    exact = torch.sqrt(-2.0 * torch.log(u1))
    fallback = torch.sqrt(-2.0 * torch.log((j.float() * 2.0**-24).clamp_min(1e-10))).double()
    error = (got - exact).abs().max().item()
    fallback_error = (fallback - exact).abs().max().item()
    print(f"radius ptx_math={ptx_math}: max |r - exact| {error:.3g}, fallback {fallback_error:.3g}")
    assert error <= 1e-6


def test_opcheck_passes_on_the_triton_kernels(triton_device: torch.device) -> None:
    for op in (fused_add, philox_uniform, philox_normal):
        assert op.sample_inputs is not None
        for sample in op.sample_inputs(triton_device):
            torch.library.opcheck(op, sample.args, sample.kwargs)


def test_torch_compile_fullgraph_matches_eager(triton_device: torch.device) -> None:
    torch._dynamo.reset()

    def f(seeds: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return fused_add(x, x) * 2, philox_uniform(seeds, 12, 1) + philox_normal(seeds, 12)

    seeds, x = seeds_on(triton_device), torch.randn(16, device=triton_device)
    compiled = torch.compile(f, fullgraph=True)(seeds, x)
    eager = f(seeds, x)
    assert torch.equal(compiled[0], eager[0]) and torch.equal(compiled[1], eager[1])


def test_a_kernel_that_cannot_compile_names_the_op_and_device(
    triton_device: torch.device, opreg_namespace: Any
) -> None:
    """A real @triton.jit body with an error: TritonKernelError names the op and the device
    and suggests OPREG_DISABLE_TRITON=1 (interpreter on CPU, the compiler on CUDA)."""
    from opreg_kernels import TritonKernelError, register_triton_op

    def identity(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    sys.path.insert(0, str(Path(__file__).parent))
    try:
        op = register_triton_op(
            name=opreg_namespace.qualname("broken"),
            fake_fn=lambda x: torch.empty_like(x),
            triton_fn="broken_kernel:launch",
            triton_device_types=triton_device.type,
        )(identity)
        with pytest.raises(TritonKernelError) as info:
            op(torch.ones(300, device=triton_device))
    finally:
        sys.path.remove(str(Path(__file__).parent))
        sys.modules.pop("broken_kernel", None)
    message = str(info.value)
    assert op.qualname in message and triton_device.type in message
    assert "OPREG_DISABLE_TRITON=1" in message
