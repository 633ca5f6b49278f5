"""The plugin with Triton kernels on CPU (Triton's interpreter), in a separate pytest process:
``TRITON_INTERPRET`` must be set before the kernels are defined, which is process-wide."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]
pytest.importorskip("opreg_kernels")

TESTS = """
import pytest
import torch
import triton
import triton.language as tl
from torch import Tensor

import opreg_kernels
from opreg_core import SampleInput
from opreg_kernels import register_triton_op


@triton.jit
def _affine(x_ptr, out_ptr, n, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2 + SHIFT, mask=mask)


def launcher(shift):
    def launch(x):
        x = x.contiguous()
        out = torch.empty_like(x)
        _affine[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), SHIFT=shift, BLOCK=64)
        return out
    return launch


def samples(device):
    yield SampleInput((torch.arange(10.0, device=device),), name="arange(10)")


def double(x: Tensor) -> Tensor:
    return 2 * x


def register(namespace, opname, shift):
    return register_triton_op(
        double,
        name=namespace.qualname(opname),
        fake_fn=torch.empty_like,
        triton_fn=launcher(shift),
        triton_device_types="cpu",
        sample_inputs=samples,
    )


def test_triton_kernel_equal_to_fallback(opreg_namespace, opreg_check):
    report = opreg_check(register(opreg_namespace, "good", 0.0), "kernel", device="cpu")
    assert report["kernel"].info["samples"] == 1


def test_triton_kernel_differing_from_fallback(opreg_namespace, opreg_check):
    opreg_check(register(opreg_namespace, "bad", 1.0), "kernel", device="cpu")


def test_triton_cpu_fixture(opreg_triton_cpu):
    assert "cpu" in opreg_kernels.fused_add.kernel_device_types
    assert "opreg::fused_add" in opreg_triton_cpu.ops


def test_restored_afterwards():
    assert "cpu" not in opreg_kernels.fused_add.kernel_device_types
    assert "cpu" not in opreg_kernels.triton_device_types()


def test_kernel_check_on_plain_cpu_says_how_to_run_the_kernel(opreg_check):
    opreg_check(opreg_kernels.fused_add, "kernel", device="cpu")


def test_shipped_kernels(opreg_device, opreg_check):
    for op in (opreg_kernels.fused_add, opreg_kernels.philox_uniform):
        report = opreg_check(op, "kernel")
        assert report["kernel"].info["triton_interpreter"] is False  # the fixture did it
"""


@pytest.mark.needs_triton
def test_triton_kernels_on_cpu_through_the_plugin(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the plugin must set it itself
    pytester.makeini("[pytest]\n")
    # A conftest that imports Triton (torch._dynamo does) before the plugin's configure hook:
    # the interpreter must already be on, or Triton's own helpers stay compiled for the GPU.
    pytester.makeconftest("import torch._dynamo\n")
    pytester.makepyfile(test_kernels=TESTS)
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-rs",
        "--opreg-triton-interpret=on",
        "--opreg-device=triton-cpu",
    )
    result.assert_outcomes(passed=4, failed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED * opreg::fused_add on cpu: kernel: no kernel registered for device type "
            "'cpu' (kernels: *); its Triton kernel runs on CPU on the device triton-cpu "
            "(--device triton-cpu, or --opreg-device triton-cpu under pytest)"
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "opreg: devices triton-cpu; Triton interpreter on",
            "*_ test_triton_kernel_differing_from_fallback _*",
            "opreg kernel check failed for opreg_test_*::bad",
            "  sample: 'arange(10)' (x: Tensor[10] float32)",
            "  case:   kernel for 'cpu' vs fallback",
            "  problem: the kernel differs from the fallback: output at index (0,): expected 0, "
            "actual 1, tolerance rtol=1.3e-06, atol=1e-05 (10 of 10 elements differ)",
        ]
    )
