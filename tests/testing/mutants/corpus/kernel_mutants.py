"""Mutants the kernel check must catch: extra kernels (a registered CPU kernel, or Triton
kernels run on CPU by Triton's interpreter) that disagree with the fallback; and a backward
that calls a Triton launcher directly (the autograd check, with the Triton path on CPU)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor

from opreg_core import SampleInput, VmapOp
from opreg_testing import OpNamespace

from .spec import NEEDS_DISTINCT_ENTRIES, NEEDS_LAYOUTS, Mutant, randn, unary


def _contiguous_samples(device: torch.device) -> Iterator[SampleInput]:
    """Contiguous only: an odd and an even number of elements, float32, and float64 values
    that float32 cannot hold."""
    yield SampleInput((randn(4, 4, seed=31).to(device),), name="4x4")
    yield SampleInput((randn(3, 5, seed=32).to(device),), name="3x5 (odd numel)")
    wide = randn(2, 3, seed=33, dtype=torch.float64) * 1e50  # beyond float32's range
    yield SampleInput((wide.to(device),), name="2x3 float64, |x| ~ 1e50")


def _with_cpu_kernel(name: str, kernel: Callable[[Tensor], Tensor]) -> Callable[..., Any]:
    def build(ns: OpNamespace) -> VmapOp[Any, Any]:
        op = unary(ns, name, lambda x: x * 2, samples=_contiguous_samples)
        op.register_kernel("cpu", kernel)
        return op

    return build


def _storage_order(x: Tensor) -> Tensor:
    """2x, computed over x's storage as if it were contiguous (ignores strides)."""
    flat = torch.as_strided(x, (x.numel(),), (1,), x.storage_offset())
    return (flat * 2).reshape(x.shape)


def _triton(name: str, check: str, wrong: str, needs: str | None = None, **options: Any) -> Mutant:
    def build(ns: OpNamespace) -> Any:
        from . import triton_ops  # imports Triton: only for runs that have it

        return triton_ops.MUTANT_BUILDERS[name](ns)

    return Mutant(name, check, wrong, build, options, needs, triton=True)


MUTANTS = [
    Mutant(
        "cpu_kernel_wrong_for_negatives",
        "kernel",
        "a registered CPU kernel clamps negative values to 0",
        _with_cpu_kernel("cpu_kernel_wrong_for_negatives", lambda x: (x * 2).clamp_min(0)),
    ),
    Mutant(
        "cpu_kernel_ignores_strides",
        "kernel",
        "a registered CPU kernel reads its input's storage as if it were contiguous",
        _with_cpu_kernel("cpu_kernel_ignores_strides", _storage_order),
        needs=NEEDS_LAYOUTS,
    ),
    Mutant(
        "cpu_kernel_loses_float64",
        "kernel",
        "a registered CPU kernel computes in float32 whatever the input dtype",
        _with_cpu_kernel("cpu_kernel_loses_float64", lambda x: (x.float() * 2).to(x.dtype)),
    ),
    _triton(
        "triton_ignores_strides",
        "kernel",
        "a Triton kernel reads its input as contiguous: wrong only for non-contiguous inputs",
        NEEDS_LAYOUTS,
    ),
    _triton(
        "triton_wrong_for_odd_sizes",
        "kernel",
        "a Triton kernel processes pairs of elements and skips the last of an odd count",
    ),
    _triton(
        "triton_mask_off_by_one",
        "kernel",
        "a row-wise Triton kernel whose mask stops one column short (cols < n_cols - 1); its "
        "backward is right (check_op skips the checks through the kernel: fix it first)",
    ),
    _triton(
        "triton_computes_in_float32",
        "kernel",
        "a Triton launcher computes in float32 whatever the input dtype",
    ),
    _triton(
        "triton_batched_mixes_entries",
        "kernel",
        "the batched Triton launcher subtracts the mean of the whole batch",
        NEEDS_DISTINCT_ENTRIES,
    ),
    _triton(
        "triton_batched_shifts_entries",
        "kernel",
        "the batched Triton launcher reads the neighbouring batch entry",
        NEEDS_DISTINCT_ENTRIES,  # permuted entries share their mean: the neighbour's is the same
    ),
    _triton(
        "backward_launches_triton",
        "autograd",
        "the backward calls its Triton launcher directly: not differentiable (gradgrad)",
    ),
    _triton(
        "backward_launches_triton_first_order",
        "autograd",
        "the backward calls its Triton launcher directly: fails under torch.func.grad "
        "(second derivatives opted out, so the torch.func part must catch it)",
        autograd={"gradgrad": False},
    ),
]


# Kernels computing in float32: the autograd check runs finite differences on the fallbacks
# and compares the kernels' derivatives with the fallbacks' (float32 tolerance).
MUTANTS += [
    _triton(
        "triton_backward_drops_rstd_term",
        "autograd",
        "RMSNorm's Triton backward kernel (float32, a backward op) drops the rstd-coupling term "
        "of dx; the fallbacks are right",
    ),
    _triton(
        "triton_backward_halves_dw",
        "autograd",
        "RMSNorm's Triton backward kernel (float32, a backward op) scales dw by 0.5; the "
        "fallbacks are right",
    ),
    _triton(
        "triton_float32_forward_wrong_torch_backward",
        "autograd",
        "RMSNorm's Triton forward kernel computes in float32 and is right; its PyTorch "
        "backward drops the rstd-coupling term of dx",
    ),
]

__all__ = ["MUTANTS"]
