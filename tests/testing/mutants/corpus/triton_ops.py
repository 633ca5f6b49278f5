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
def _double_rows_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * n_cols
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols - 1  # off by one (should be n_cols): each row's last element is lost
    tl.store(out_ptr + row + cols, tl.load(x_ptr + row + cols, mask=mask) * 2, mask=mask)


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


def launch_double_rows_off_by_one(x: Tensor) -> Tensor:
    """Wrong: one program per row, whose mask stops one column short (the last column stays 0)."""
    rows = x.contiguous().view(-1, x.shape[-1]) if x.dim() else x.reshape(1, 1)
    out = torch.zeros_like(rows)  # zeros, not empty: an unwritten element is 0, not leftovers
    block = triton.next_power_of_2(rows.shape[1])
    _double_rows_kernel[(rows.shape[0],)](rows, out, rows.shape[1], BLOCK=block)
    return out.view(x.shape)


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


def row_samples(device: torch.device) -> Iterator[SampleInput]:
    """A 32x32 first, as a user's sample may be (1024 elements: gradcheck runs in fast mode,
    and on a failure recomputes the whole Jacobian in slow mode for its message, two launches
    per input element through Triton's interpreter: about a minute), then the small ones."""
    yield SampleInput((randn(32, 32, seed=45).to(device),), name="32x32")
    yield from samples(device)


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
    "triton_mask_off_by_one": lambda ns: _double_op(
        ns, "triton_mask_off_by_one", launch_double_rows_off_by_one, sample_inputs=row_samples
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


# -- RMSNorm computing in float32, with a Triton backward op (examples/triton_rmsnorm.py) --------
# Finite differences in float64 are meaningless through kernels that compute in float32: the
# autograd check runs them on the fallbacks and compares the kernels' derivatives with the
# fallbacks' at float32 tolerance. These entries must be judged right on the Triton path.


@triton.jit
def _rms_fwd_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr, F32: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * n_cols
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    if F32:
        x = x.to(tl.float32)
        w = w.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(y_ptr + row + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rms_bwd_kernel(
    g_ptr,
    x_ptr,
    w_ptr,
    dx_ptr,
    dw_rows_ptr,
    n_cols,
    eps,
    dw_scale,
    BLOCK: tl.constexpr,
    F32: tl.constexpr,
    COUPLING: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * n_cols
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    g = tl.load(g_ptr + row + cols, mask=mask, other=0.0)
    x = tl.load(x_ptr + row + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    if F32:
        g = g.to(tl.float32)
        x = x.to(tl.float32)
        w = w.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    gw = g * w
    dx = rstd * gw
    if COUPLING:  # the term through rstd's dependence on the whole row
        dx = dx - x * (rstd * rstd * rstd) * (tl.sum(gw * x, axis=0) / n_cols)
    tl.store(dx_ptr + row + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    tl.store(dw_rows_ptr + row + cols, (g * x * rstd * dw_scale).to(tl.float32), mask=mask)


def _rows(x: Tensor) -> Tensor:
    return x.contiguous().view(-1, x.shape[-1])


def launch_rms_norm(x: Tensor, w: Tensor, eps: float, f32: bool = True) -> Tensor:
    x2 = _rows(x)
    y = torch.empty_like(x2)
    block = triton.next_power_of_2(x2.shape[1])
    _rms_fwd_kernel[(x2.shape[0],)](x2, w.contiguous(), y, x2.shape[1], eps, BLOCK=block, F32=f32)
    return y.view(x.shape)


def launch_rms_norm_backward(
    g: Tensor,
    x: Tensor,
    w: Tensor,
    eps: float,
    f32: bool = True,
    coupling: bool = True,
    dw_scale: float = 1.0,
) -> tuple[Tensor, Tensor]:
    g2, x2 = _rows(g), _rows(x)
    dx = torch.empty_like(x2)
    dw_rows = torch.empty(x2.shape, dtype=torch.float32, device=x.device)
    block = triton.next_power_of_2(x2.shape[1])
    _rms_bwd_kernel[(x2.shape[0],)](
        g2, x2, w.contiguous(), dx, dw_rows, x2.shape[1], eps, dw_scale,
        BLOCK=block, F32=f32, COUPLING=coupling,
    )  # fmt: skip
    dw = dw_rows.sum(0) if f32 else dw_rows.double().sum(0)
    return dx.view(x.shape), dw.to(w.dtype)


def rms_norm_reference(x: Tensor, w: Tensor, eps: float) -> Tensor:
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps).contiguous()


def rms_norm_backward_reference(
    g: Tensor, x: Tensor, w: Tensor, eps: float, coupling: bool = True
) -> tuple[Tensor, Tensor]:
    """(dx, dw) of RMSNorm in PyTorch (``coupling=False``: wrong, the rstd term dropped)."""
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    gw = g * w
    dx = rstd * gw
    if coupling:
        dx = dx - x * rstd.pow(3) * (gw * x).mean(-1, keepdim=True)
    dw = (g * x * rstd).reshape(-1, x.shape[-1]).sum(0)
    return dx.contiguous(), dw


def rms_samples(device: torch.device) -> Iterator[SampleInput]:
    """Rows of 8 and 12 (a masked block), float32 (the autograd check widens them to float64;
    the kernel check holds float64 inputs to float64 precision, which these kernels lack)."""
    w8 = torch.rand(8, generator=torch.Generator().manual_seed(51)) + 0.5
    yield SampleInput((randn(3, 8, seed=52).to(device), w8.to(device), 1e-6), name="3x8")
    w12 = torch.rand(12, generator=torch.Generator().manual_seed(53)) + 0.5
    yield SampleInput((randn(2, 12, seed=54).to(device), w12.to(device), 1e-6), name="2x12")


def _rms_fake(x: Tensor, w: Tensor, eps: float) -> Tensor:
    return contiguous_like(x)


def _rms_backward_fake(g: Tensor, x: Tensor, w: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    return contiguous_like(x), torch.empty(w.shape, dtype=w.dtype, device=w.device)


def _rms_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, w, eps = inputs
    ctx.save_for_backward(x, w)
    ctx.eps = eps


def _rms_norm_op(
    ns: OpNamespace,
    name: str,
    *,
    f32: bool = True,
    coupling: bool = True,
    dw_scale: float = 1.0,
    torch_backward: Callable[..., Any] | None = None,
    launch: Callable[..., Tensor] | None = None,
    autocast: Any = None,
) -> VmapOp[Any, Any]:
    """RMSNorm as two Triton ops (forward, and a backward op registered without a backward,
    called by the forward's backward), both with right PyTorch fallbacks. ``f32``: the kernels
    compute in float32 (else in the input dtype); ``coupling``/``dw_scale``: the backward
    kernel keeps the rstd-coupling term of dx and scales dw; ``torch_backward``: a PyTorch
    backward instead of the backward op; ``launch``: another forward launcher;
    ``autocast``: the op's autocast rule."""

    def launch_backward(g: Tensor, x: Tensor, w: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        return launch_rms_norm_backward(g, x, w, eps, f32, coupling, dw_scale)

    backward_op = register_triton_op(
        rms_norm_backward_reference,
        name=ns.qualname(f"{name}_backward"),
        schema="(Tensor g, Tensor x, Tensor w, float eps) -> (Tensor, Tensor)",
        fake_fn=_rms_backward_fake,
        triton_fn=launch_backward,
        triton_device_types="cpu",
    )

    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor, None]:
        x, w = ctx.saved_tensors
        if torch_backward is not None:
            dx, dw = torch_backward(g, x, w, ctx.eps)
        else:
            dx, dw = backward_op(g, x, w, ctx.eps)
        return dx, dw, None

    return register_triton_op(
        rms_norm_reference,
        name=ns.qualname(name),
        schema="(Tensor x, Tensor w, float eps) -> Tensor",
        fake_fn=_rms_fake,
        triton_fn=launch or (lambda x, w, eps: launch_rms_norm(x, w, eps, f32)),
        triton_device_types="cpu",
        setup_context=_rms_setup,
        backward=backward,
        sample_inputs=rms_samples,
        autocast=autocast,
    )


MUTANT_BUILDERS.update(
    {
        "triton_backward_drops_rstd_term": lambda ns: _rms_norm_op(
            ns, "triton_backward_drops_rstd_term", coupling=False
        ),
        "triton_backward_halves_dw": lambda ns: _rms_norm_op(
            ns, "triton_backward_halves_dw", dw_scale=0.5
        ),
        "triton_autocast_output_float32": lambda ns: _rms_norm_op(
            ns,
            "triton_autocast_output_float32",
            launch=lambda x, w, eps: launch_rms_norm(x.float(), w.float(), eps),
            autocast="lower_precision",
        ),
        "triton_float32_forward_wrong_torch_backward": lambda ns: _rms_norm_op(
            ns,
            "triton_float32_forward_wrong_torch_backward",
            torch_backward=lambda g, x, w, eps: rms_norm_backward_reference(
                g, x, w, eps, coupling=False
            ),
        ),
    }
)

CORRECT_BUILDERS.update(
    {
        "triton_rmsnorm_float32": lambda ns: _rms_norm_op(ns, "triton_rmsnorm_float32"),
        "triton_rmsnorm_autocast": lambda ns: _rms_norm_op(
            ns, "triton_rmsnorm_autocast", autocast="lower_precision"
        ),
        "triton_rmsnorm_input_dtype": lambda ns: _rms_norm_op(
            ns, "triton_rmsnorm_input_dtype", f32=False
        ),
    }
)
