# mypy: disallow-untyped-defs=False, disallow-incomplete-defs=False
# mypy: disallow-untyped-decorators=False
"""Triton kernels of the corpus: right and deliberately wrong launchers, run on CPU through
Triton's interpreter. Imported only where Triton is installed and the interpreter is on (the
kernels are defined for the interpreter when this module is imported)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

from opreg_core import SampleInput, VmapOp
from opreg_kernels import register_triton_op
from opreg_testing import OpNamespace

from .spec import contiguous_like, randn, rest

_BLOCK = 64


@triton.jit
def _double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)


@triton.jit
def _double_pairs_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < (n // 2) * 2  # whole pairs only: the last element of an odd count is lost
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)


@triton.jit
def _sub_kernel(x_ptr, m_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x - tl.load(m_ptr + offsets, mask=mask), mask=mask)


def _grid(n: int) -> tuple[int]:
    return (triton.cdiv(max(n, 1), _BLOCK),)


def launch_double(x: Tensor) -> Tensor:
    """Right: ``2 * x`` for any layout (the input is made contiguous first)."""
    x = x.contiguous()
    out = torch.empty_like(x)
    _double_kernel[_grid(x.numel())](x, out, x.numel(), BLOCK=_BLOCK)
    return out


def launch_double_ignoring_strides(x: Tensor) -> Tensor:
    """Wrong for non-contiguous inputs: reads x's memory in storage order."""
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _double_kernel[_grid(x.numel())](x, out, x.numel(), BLOCK=_BLOCK)
    return out


def launch_double_pairs(x: Tensor) -> Tensor:
    """Wrong for an odd number of elements."""
    x = x.contiguous()
    out = torch.zeros_like(x)
    _double_pairs_kernel[_grid(x.numel())](x, out, x.numel(), BLOCK=_BLOCK)
    return out


def launch_double_float32(x: Tensor) -> Tensor:
    """Wrong for float64: computes in float32."""
    return launch_double(x.float()).to(x.dtype)


def _subtract(x: Tensor, m: Tensor) -> Tensor:
    x = x.contiguous()
    m = m.expand_as(x).contiguous()
    out = torch.empty_like(x)
    _sub_kernel[_grid(x.numel())](x, m, out, x.numel(), BLOCK=_BLOCK)
    return out


def launch_center(x: Tensor) -> Tensor:
    """Right: ``x - x.mean()`` for one sample."""
    return _subtract(x, x.mean())


def launch_center_batched(x: Tensor) -> Tensor:
    """Right: each batch entry minus its own mean."""
    return _subtract(x, x.mean(rest(x), keepdim=True))


def launch_center_batched_mixing(x: Tensor) -> Tensor:
    """Wrong: every entry minus the mean of the whole batch."""
    return _subtract(x, x.mean())


def launch_center_batched_shifted(x: Tensor) -> Tensor:
    """Wrong: each entry minus the mean of its neighbour."""
    return _subtract(x, x.roll(1, 0).mean(rest(x), keepdim=True))


def samples(device: torch.device) -> Iterator[SampleInput]:
    """Contiguous only: an odd and an even number of elements, float32 and float64."""
    yield SampleInput((randn(4, 4, seed=41).to(device),), name="4x4")
    yield SampleInput((randn(3, 5, seed=42).to(device),), name="3x5 (odd numel)")
    yield SampleInput((randn(2, 3, seed=43, dtype=torch.float64).to(device),), name="2x3 float64")


def wide_samples(device: torch.device) -> Iterator[SampleInput]:
    """Also float64 values that float32 cannot hold (the float32 mutant's kernel check only:
    finite differences cannot differentiate at this magnitude)."""
    yield from samples(device)
    wide = randn(2, 3, seed=44, dtype=torch.float64) * 1e50
    yield SampleInput((wide.to(device),), name="2x3 float64, |x| ~ 1e50")


def _double_op(
    ns: OpNamespace, name: str, launcher: Callable[[Tensor], Tensor], **options: Any
) -> VmapOp[Any, Any]:
    options.setdefault("backward", lambda ctx, g: 2 * g)
    options.setdefault("sample_inputs", samples)
    return register_triton_op(
        lambda x: 2 * x,
        name=ns.qualname(name),
        schema="(Tensor x) -> Tensor",
        fake_fn=contiguous_like,
        triton_fn=launcher,
        vmap_fn=lambda x: 2 * x,
        fake_vmap_fn=contiguous_like,
        triton_vmap_fn=launcher,
        triton_device_types="cpu",
        **options,
    )


def _center_op(ns: OpNamespace, name: str, batched: Callable[[Tensor], Tensor]) -> VmapOp[Any, Any]:
    return register_triton_op(
        lambda x: x - x.mean(),
        name=ns.qualname(name),
        schema="(Tensor x) -> Tensor",
        fake_fn=contiguous_like,
        triton_fn=launch_center,
        vmap_fn=lambda x: x - x.mean(rest(x), keepdim=True),
        fake_vmap_fn=contiguous_like,
        triton_vmap_fn=batched,
        triton_device_types="cpu",
        backward=lambda ctx, g: g - g.mean(),
        sample_inputs=samples,
    )


MUTANT_BUILDERS: dict[str, Callable[[OpNamespace], Any]] = {
    "triton_ignores_strides": lambda ns: _double_op(
        ns, "triton_ignores_strides", launch_double_ignoring_strides
    ),
    "triton_wrong_for_odd_sizes": lambda ns: _double_op(
        ns, "triton_wrong_for_odd_sizes", launch_double_pairs
    ),
    "triton_computes_in_float32": lambda ns: _double_op(
        ns, "triton_computes_in_float32", launch_double_float32, sample_inputs=wide_samples
    ),
    "triton_batched_mixes_entries": lambda ns: _center_op(
        ns, "triton_batched_mixes_entries", launch_center_batched_mixing
    ),
    "triton_batched_shifts_entries": lambda ns: _center_op(
        ns, "triton_batched_shifts_entries", launch_center_batched_shifted
    ),
    "backward_launches_triton": lambda ns: _double_op(
        ns, "backward_launches_triton", launch_double, backward=lambda ctx, g: launch_double(g)
    ),
    "backward_launches_triton_first_order": lambda ns: _double_op(
        ns,
        "backward_launches_triton_first_order",
        launch_double,
        backward=lambda ctx, g: launch_double(g),
    ),
}


def _once_differentiable_triton(ns: OpNamespace) -> VmapOp[Any, Any]:
    """``2 * x`` whose backward calls a Triton op registered without a backward (the pattern
    of examples/triton_rmsnorm.py): once differentiable."""
    double_grad = register_triton_op(
        lambda g: 2 * g,
        name=ns.qualname("double_grad"),
        schema="(Tensor g) -> Tensor",
        fake_fn=contiguous_like,
        triton_fn=launch_double,
        vmap_fn=lambda g: 2 * g,
        fake_vmap_fn=contiguous_like,
        triton_vmap_fn=launch_double,
        triton_device_types="cpu",
    )
    return _double_op(
        ns, "once_differentiable_triton", launch_double, backward=lambda ctx, g: double_grad(g)
    )


CORRECT_BUILDERS: dict[str, Callable[[OpNamespace], Any]] = {
    "triton_double": lambda ns: _double_op(ns, "triton_double", launch_double),
    "triton_center": lambda ns: _center_op(ns, "triton_center", launch_center_batched),
    "once_differentiable_triton": _once_differentiable_triton,
}
