"""The checks on CUDA: a Triton kernel compiled for the GPU against its fallback, and a second
GPU. Skipped (by the plugin's markers) on machines without them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import Tensor

from opreg_testing import CheckFailure, OpNamespace, SampleInput, check_kernel, check_op

kernels = pytest.importorskip("opreg_kernels")


def _samples(device: torch.device) -> Iterator[SampleInput]:
    yield SampleInput((torch.arange(1000.0, device=device),), name="arange(1000)")
    yield SampleInput((torch.randn(7, 3, device=device),), name="7x3")


def _launcher(shift: float) -> Any:
    import triton
    import triton.language as tl

    @triton.jit  # type: ignore[misc]
    def affine(x_ptr, out_ptr, n, SHIFT: tl.constexpr, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        # (Triton reads the annotations: only tl.constexpr may appear there.)
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2 + SHIFT, mask=mask)

    def launch(x: Tensor) -> Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        affine[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), SHIFT=shift, BLOCK=256)
        return out

    return launch


def _register(namespace: OpNamespace, opname: str, shift: float) -> Any:
    def double(x: Tensor) -> Tensor:
        return 2 * x

    return kernels.register_triton_op(
        double,
        name=namespace.qualname(opname),
        fake_fn=torch.empty_like,
        triton_fn=_launcher(shift),
        triton_device_types="cuda",
        sample_inputs=_samples,
    )


@pytest.mark.needs_cuda
@pytest.mark.needs_triton
def test_triton_kernel_on_cuda_against_fallback(opreg_namespace: OpNamespace) -> None:
    good = check_kernel(_register(opreg_namespace, "good", 0.0), device="cuda")
    assert good.passed and good.info["kernel"] == "triton"
    with pytest.raises(CheckFailure) as info:
        check_kernel(_register(opreg_namespace, "bad", 0.5), device="cuda")
    message = str(info.value)
    assert "sample: 'arange(1000)' (x: Tensor[1000] float32 cuda:0)" in message
    assert (
        "the kernel differs from the fallback: output at index (0,): expected 0, actual 0.5"
        in message
    )


@pytest.mark.needs_gpus(2)
def test_checks_on_a_second_gpu() -> None:
    report = check_op(kernels.fused_add, checks="fake,vmap,kernel,autograd", device="cuda:1")
    assert report.ok and report.device == "cuda:1", report.summary()
    assert report["kernel"].passed
