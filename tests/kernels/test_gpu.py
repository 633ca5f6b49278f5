"""CUDA-only behaviour: the device guard on several GPUs, CUDA graphs, 64-bit indexing.

Skipped without CUDA (and when TRITON_INTERPRET=1): ``benchmarks/gpu/run_gpu.sh`` runs it
on the H200 machines.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

import opreg_kernels
from opreg_kernels import fused_add, philox_normal, philox_uniform
from opreg_testing import interpreter_enabled

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or interpreter_enabled(),
    reason="needs a CUDA device and compiled Triton kernels",
)

needs_two_gpus = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two GPUs"
)


@pytest.fixture(autouse=True)
def _triton_available() -> None:
    if not opreg_kernels.has_triton():
        pytest.skip("Triton is not available")


# The first launch of each kernel happens on cuda:1 while cuda:0 is current: the case
# that fails or poisons Triton's per-device state without a guard. Fresh process, so
# that no kernel was compiled or loaded before.
_GUARD_SCRIPT = """
import json, torch
import opreg_kernels as ok
torch.cuda.set_device(0)
out = {}
x1 = torch.randn(1 << 20, device="cuda:1")
s1 = torch.arange(64, device="cuda:1")
a1 = ok.fused_add(x1, x1)
u1 = ok.philox_uniform(s1, 1000, 3)
z1 = ok.philox_normal(s1, 1000, 3)
v1 = torch.vmap(ok.philox_uniform, in_dims=(0, None))(s1.reshape(8, 8), 100)
torch.cuda.synchronize(1)
out["current_after_cuda1"] = torch.cuda.current_device()
out["cuda1_add_ok"] = bool(torch.equal(a1, x1 + x1))
s = s1.cpu()
out["cuda1_uniform_ok"] = bool(torch.equal(u1.cpu(), ok.philox_uniform.fallback(s, 1000, 3)))
out["cuda1_normal_err"] = float((z1.cpu() - ok.philox_normal.fallback(s, 1000, 3)).abs().max())
out["cuda1_vmap_ok"] = bool(torch.equal(v1.cpu().flatten(0, 1), ok.philox_uniform.fallback(s, 100)))
out["devices"] = [a1.device.index, u1.device.index, z1.device.index, v1.device.index]
x0 = torch.randn(1 << 20, device="cuda:0")
s0 = s1.to("cuda:0")
a0 = ok.fused_add(x0, x0)
u0 = ok.philox_uniform(s0, 1000, 3)
torch.cuda.synchronize(0)
out["cuda0_add_ok"] = bool(torch.equal(a0, x0 + x0))
out["cuda0_uniform_ok"] = bool(torch.equal(u0.cpu(), u1.cpu()))
with torch.cuda.device(1):
    a0b = ok.fused_add(x0, x0)  # cuda:0 tensors while cuda:1 is current
    out["current_inside"] = torch.cuda.current_device()
out["cuda0_from_cuda1_ok"] = bool(torch.equal(a0b, x0 + x0))
print(json.dumps(out))
"""


@needs_two_gpus
def test_device_guard_on_a_second_gpu() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_GUARD_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(result)
    assert result["current_after_cuda1"] == 0
    assert result["devices"] == [1, 1, 1, 1]
    for key in ("cuda1_add_ok", "cuda1_uniform_ok", "cuda1_vmap_ok", "cuda0_add_ok"):
        assert result[key] is True, key
    assert result["cuda0_uniform_ok"] is True
    assert result["cuda1_normal_err"] < 4e-6
    assert result["current_inside"] == 1 and result["cuda0_from_cuda1_ok"] is True


@needs_two_gpus
def test_device_guard_in_process() -> None:
    x = torch.randn(4096, device="cuda:1")
    with torch.cuda.device(0):
        assert torch.equal(fused_add(x, x), x + x)
        assert torch.cuda.current_device() == 0
    seeds = torch.arange(16, device="cuda:1")
    assert torch.equal(philox_uniform(seeds, 33).cpu(), philox_uniform.fallback(seeds.cpu(), 33))


def test_cuda_graph_capture_and_replay() -> None:
    seeds = torch.arange(32, device="cuda")
    x = torch.randn(1 << 16, device="cuda")
    counter = 5

    def step() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return fused_add(x, x), philox_uniform(seeds, 257, counter), philox_normal(seeds, 64)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm up: compile and load the kernels outside the capture
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    eager = step()
    for got, want in zip(captured, eager, strict=True):
        assert torch.equal(got, want)


def test_compile_reduce_overhead_matches_eager() -> None:
    torch._dynamo.reset()

    def f(seeds: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return fused_add(x, philox_uniform(seeds, 128, 1)) + philox_normal(seeds, 128)

    seeds = torch.arange(8, device="cuda")
    x = torch.randn(8, 128, device="cuda")
    compiled = torch.compile(f, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):  # record, then replay the CUDA graph
        got = compiled(seeds, x)
    assert torch.equal(got, f(seeds, x))


def test_int64_indexing_beyond_two_gigaelements() -> None:
    free, _ = torch.cuda.mem_get_info()
    if free < 40 * 2**30:
        pytest.skip("needs 40 GiB of free GPU memory")
    n = 2**31 + 8  # one row of 8 GiB: the 64-bit index path of the long-row kernel
    row = philox_uniform(torch.tensor([99], device="cuda"), n)
    tail = row[0, -16:].cpu()
    del row
    # Values j >= n - 16 come from Philox calls k = j // 4; counter k0 re-creates them.
    k0 = (n - 16) // 4
    assert torch.equal(tail, philox_uniform.fallback(torch.tensor([99]), 16, k0)[0])
    big = torch.ones(2**31 + 1000, dtype=torch.float16, device="cuda")
    out = fused_add(big, big)
    assert out[-1000:].eq(2).all() and out[:1000].eq(2).all()


def test_cached_launches_match_for_every_specialisation() -> None:
    # The launchers reuse compiled kernels per specialisation key (alignment, sizes, dtype,
    # device): repeated and mixed calls must each run the right variant.
    base = torch.randn(4096 + 3, device="cuda")
    other = torch.randn(4096 + 3, device="cuda")
    for _ in range(3):
        for start, stop in ((0, 4096), (1, 4097), (0, 1), (3, 4099), (0, 17), (2, 3)):
            x, y = base[start:stop], other[start:stop]
            assert torch.equal(fused_add(x, y), x + y), (start, stop)
        for dtype in (torch.float16, torch.int32):
            xi, yi = base[:100].to(dtype), other[:100].to(dtype)
            assert torch.equal(fused_add(xi, yi), xi + yi)
    seeds = torch.arange(40, device="cuda") * 977
    for _ in range(2):
        for n, counter in ((1, 0), (4, 2**32 - 1), (16, 5), (2049, 1), (4100, 2**40)):
            for rows in (seeds, seeds[1:], seeds[:1]):
                got = philox_uniform(rows, n, counter).cpu()
                assert torch.equal(got, philox_uniform.fallback(rows.cpu(), n, counter)), n
                normal = philox_normal(rows, n, counter).cpu()
                ref = philox_normal.fallback(rows.cpu(), n, counter)
                assert (normal - ref).abs().max().item() <= 4e-6
    if torch.cuda.device_count() > 1:  # the same key on another device: its own kernel
        x1 = base.to("cuda:1")
        assert torch.equal(fused_add(x1, x1).cpu(), (base + base).cpu())
        assert torch.equal(
            philox_uniform(seeds.to("cuda:1"), 16).cpu(), philox_uniform.fallback(seeds.cpu(), 16)
        )


def test_philox_normal_exact_matches_the_cpu_fallback_bit_for_bit_on_2_26_values() -> None:
    """The exact op's CUDA kernel against its CPU fallback, 2**26 values: long rows at a
    counter whose low word wraps, odd-length rows past 2**32 calls, and many short rows
    (benchmarks/exact_normal.py checks 3.6 * 2**26 more, and times the op)."""
    from opreg_kernels.ops.philox import philox_normal_exact

    cases = [
        (torch.arange(32) * 7919 - 10**6, 2**20, 2**32 - 100),
        (torch.arange(16) * 2**33 + 5, 2**20 + 3, 2**40 + 12345),
        (torch.arange(2**22) * 31 - 2**62, 4, 7),
    ]
    total = 0
    for seeds, n, counter in cases:
        rows = max(1, 2**22 // n)  # CPU chunks of about 2**22 values
        for start in range(0, len(seeds), rows):
            part = seeds[start : start + rows]
            got = philox_normal_exact(part.cuda(), n, counter).cpu().view(torch.int32)
            expected = philox_normal_exact.fallback(part, n, counter).view(torch.int32)
            differ = (got != expected).nonzero()
            assert differ.numel() == 0, (
                f"n={n} counter={counter}: {len(differ)} values differ, first at (row, col) "
                f"{differ[0].tolist()} of the chunk from row {start}"
            )
            total += got.numel()
    assert total >= 2**26
