"""A user's Triton op for the compiler-visible tests: ``2 * x`` through one ``@triton.jit``
kernel, with a launcher that goes through ``torch.library.wrap_triton`` (the form
``compiler_visible=True`` asks for) and one that does not (the mistake the mode must refuse).
Imported only by tests that have Triton, and by the AOTInductor tests' fresh processes."""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from opreg_core import VmapOp
from opreg_kernels import register_triton_op

_BLOCK = 128


@triton.jit  # type: ignore[untyped-decorator]
def _double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)


def launch(x: torch.Tensor) -> torch.Tensor:
    """The launcher as ``compiler_visible=True`` wants it: the kernel through wrap_triton."""
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    torch.library.wrap_triton(_double_kernel)[(triton.cdiv(n, _BLOCK),)](x, out, n, BLOCK=_BLOCK)
    return out


def launch_bare(x: torch.Tensor) -> torch.Tensor:
    """The same launch as a bare ``kernel[grid](...)``: right in eager, untraceable."""
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    _double_kernel[(triton.cdiv(n, _BLOCK),)](x, out, n, BLOCK=_BLOCK)
    return out


def double(x: torch.Tensor) -> torch.Tensor:
    """The fallback: ``2 * x`` as a new contiguous tensor."""
    return (x * 2).contiguous()


def _fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
    return grad * 2


def register_double(name: str, **options: Any) -> VmapOp[[torch.Tensor], torch.Tensor]:
    """``name`` as a ``2 * x`` Triton op; ``options`` override the defaults (visible, with
    ``launch`` for the op and its batched op, a backward and a sample)."""
    from opreg_core import SampleInput

    defaults: dict[str, Any] = {
        "name": name,
        "fake_fn": _fake,
        "triton_fn": launch,
        "vmap_fn": double,
        "fake_vmap_fn": _fake,
        "triton_vmap_fn": launch,
        "compiler_visible": True,
        "backward": _backward,
        "sample_inputs": lambda device: [
            SampleInput((torch.randn(5, 3, device=device),), name="matrix"),
            SampleInput((torch.randn(7, device=device).double(),), name="float64"),
        ],
    }
    defaults.update(options)

    def fallback(x: torch.Tensor) -> torch.Tensor:
        return double(x)

    return register_triton_op(fallback, **defaults)


@triton.jit  # type: ignore[untyped-decorator]
def _double_in_place_kernel(x_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)


def launch_in_place(x: torch.Tensor) -> None:
    """Doubles ``x`` in place (``x`` contiguous), through wrap_triton."""
    n = x.numel()
    torch.library.wrap_triton(_double_in_place_kernel)[(triton.cdiv(n, _BLOCK),)](
        x, n, BLOCK=_BLOCK
    )


def register_double_in_place(name: str) -> VmapOp[[torch.Tensor], None]:
    """``name`` as an in-place ``x *= 2`` Triton op (``mutates_args=("x",)``), visible."""

    def fallback(x: torch.Tensor) -> None:
        x.mul_(2)

    return register_triton_op(
        fallback, name=name, fake_fn=lambda x: None, triton_fn=launch_in_place,
        mutates_args=("x",), differentiable=False, compiler_visible=True,
    )  # fmt: skip
