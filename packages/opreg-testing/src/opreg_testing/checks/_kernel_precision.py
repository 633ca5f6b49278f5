"""For the autograd check on a device where a kernel serves the op: the precision the kernel
computes at, and a way to run the fallbacks instead.

Finite differences in float64 (gradcheck, gradgradcheck) mean something only for an op that
computes in float64: a kernel that computes internally in float32 (the norm for Triton
kernels: ``tl.load(...).to(tl.float32)``) loses the perturbations in its rounding, and a
correct op would fail. :func:`kernel_precision` finds the precision by running the kernel and
the fallback on the float64 samples; :func:`fallback_path` says how to run the op (and every
op its backward calls) with the fallbacks on the device, so that the finite differences check
the math there, while the kernel's own derivatives are compared with the fallback's at the
tolerance of the precision found.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from opreg_core import SampleInput, VmapOp, registered_ops

from ..compare import Tolerance, compare, tolerance_for
from ..interpreter import triton_info
from ..samples import map_tensors
from ._harness import CheckContext

#: A kernel whose float64 outputs are this close to the fallback's computes in float64 (a
#: different order of float64 operations differs by ~1e-15; float32 rounding by ~1e-8).
FLOAT64_AGREEMENT = Tolerance(1e-10, 1e-12)

#: The precisions a kernel may compute at, from the finest; each is tried in turn.
_CANDIDATES = (torch.float32, torch.bfloat16, torch.float16)


def kernel_served(ctx: CheckContext) -> VmapOp[Any, Any] | None:
    """The opreg op when a kernel (Triton, or ``register_kernel``) serves the check's device."""
    op = ctx.target.opreg
    if op is None or ctx.device.type not in op.kernel_device_types:
        return None
    return op


def kernel_words(ctx: CheckContext) -> str:
    """How messages name the kernel serving the device: ``the Triton kernels on 'cpu'``."""
    op = ctx.target.opreg
    what = "Triton kernels" if op is not None and triton_info(op) is not None else "kernels"
    return f"the {what} on {ctx.device.type!r}"


def dtype_name(dtype: torch.dtype) -> str:
    """``float32`` for ``torch.float32``."""
    return str(dtype).removeprefix("torch.")


def kernel_precision(
    ctx: CheckContext, op: VmapOp[Any, Any], doubled: list[SampleInput]
) -> torch.dtype | None:
    """The precision the kernel computes float64 inputs at: float64 when its outputs agree
    with the fallback's to float64 rounding on every sample, else the first of float32,
    bfloat16 and float16 whose tolerance (the kernel check's, ``ctx.tolerance`` applied) they
    meet; None when they meet none (the kernel is wrong: the kernel check says so)."""
    pairs = []
    for sample in doubled:
        with ctx.step("the fallback", sample, "kernel precision, float64 inputs"):
            expected = ctx.run(op.fallback, sample)[0]
        with ctx.step("the kernel", sample, "kernel precision, float64 inputs"):
            actual = ctx.run(op, sample)[0]
        pairs.append((expected, actual))

    def meets(tol: Tolerance) -> bool:
        return all(compare(e, a, tolerance=tol) is None for e, a in pairs)

    if meets(FLOAT64_AGREEMENT):
        return torch.float64
    for dtype in _CANDIDATES:
        if meets(tolerance_for(dtype, ctx.tolerance)):
            return dtype
    return None


@dataclass(frozen=True)
class FallbackPath:
    """How to run the op with its fallback (and every op's fallback) instead of the kernels."""

    serving: Callable[[], AbstractContextManager[Any]]  #: the context to run it in
    move: Callable[[SampleInput], SampleInput]  #: the sample on the path's device
    where: str  #: in words, for the report


def _same(sample: SampleInput) -> SampleInput:
    return sample


def _on_cpu(sample: SampleInput) -> SampleInput:
    def cpu(t: torch.Tensor) -> torch.Tensor:
        return t.detach().cpu()

    return SampleInput(map_tensors(cpu, sample.args), map_tensors(cpu, sample.kwargs), sample.name)


@contextmanager
def _triton_kernels_off(device_type: str, ops: list[VmapOp[Any, Any]]) -> Iterator[None]:
    """The Triton kernels of ``ops`` stop serving ``device_type`` for the block, then serve it
    again (the fallbacks run in between)."""
    removed = []
    try:
        for op in ops:
            info = triton_info(op)
            if info is not None and info.remove_device_type(device_type):
                removed.append(info)
        yield
    finally:
        for info in removed:
            info.add_device_type(device_type)


def fallback_path(ctx: CheckContext) -> FallbackPath | None:
    """Where the fallbacks run: on the device itself with every Triton kernel serving it
    taken off for the duration (when Triton kernels are all that serve it), else on CPU copies
    (when no kernel serves the CPU); None when neither is possible (a ``register_kernel``
    kernel serves the device and the CPU)."""
    device_type = ctx.device.type
    served = [op for op in registered_ops() if device_type in op.kernel_device_types]
    triton_ops = [op for op in served if triton_info(op) is not None]
    if len(triton_ops) == len(served):
        return FallbackPath(
            lambda: _triton_kernels_off(device_type, triton_ops),
            _same,
            f"the fallbacks (the Triton kernels serving {device_type!r} taken off)",
        )
    if device_type != "cpu" and not any("cpu" in op.kernel_device_types for op in registered_ops()):
        return FallbackPath(_no_change, _on_cpu, "the fallbacks on CPU copies of the inputs")
    return None


@contextmanager
def _no_change() -> Iterator[None]:
    yield
