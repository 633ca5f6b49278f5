"""A SwiGLU-like op whose Triton backward writes the gradients into the saved inputs, as two
opreg ops, and the hand-written ``torch.autograd.Function`` around the same kernels.

Run: ``python examples/triton_swiglu.py`` on a CUDA machine, or
``TRITON_INTERPRET=1 python examples/triton_swiglu.py`` on CPU (Triton's interpreter). It
compares the op, the Function and PyTorch, forward and backward, and exits non-zero on a
mismatch. ``benchmarks/bench_swiglu.py`` times the two against each other and
``tests/kernels/test_swiglu_inplace.py`` checks them; both import this file.

``c = silu(a) * b`` for ``a`` and ``b`` of one shape and dtype. Libraries that train with
hand-written Triton kernels (Liger-Kernel's SwiGLU and GeGLU) save memory in the backward:
one kernel reads ``dc``, ``a`` and ``b`` and overwrites ``a`` with ``da`` and ``b`` with
``db``, and the backward returns ``a`` and ``b`` as the gradients, so no gradient buffer is
allocated. With opreg (docs/triton.md, "Porting a hand-written Function with an in-place
backward"):

1. the kernels: ``_swiglu_fwd`` and the in-place ``_swiglu_bwd_``, one program per block of
   ``BLOCK`` elements, computing in float32, launched through ``fast_launch``;
2. the launchers ``swiglu_forward`` and ``swiglu_backward_inplace``: what a hand-written
   Function calls, and the ``triton_fn`` of the ops;
3. the in-place write as its own op, ``swiglu_backward_``, declared with
   ``mutates_args=("a", "b")``: the dispatcher bumps the buffers' version counters (autograd
   then refuses a second backward through the graph instead of reading the overwritten
   activations) and ``torch.compile`` knows about the write;
4. the op ``swiglu``, whose ``backward`` calls ``swiglu_backward_`` and returns ``a`` and
   ``b``; opreg-testing's autograd check reports it once differentiable;
5. ``SwiGLUFunction``: the same two launchers in a hand-written Function, as a library
   writes it today (its backward writes through pointers: autograd does not see the write).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
import triton
import triton.language as tl

from opreg_core import SampleInput
from opreg_kernels import fast_launch, register_triton_op, triton_kernel_info

#: Elements per program and warps per program of both kernels.
BLOCK = 2048
NUM_WARPS = 8


# 1. the kernels: c = silu(a) * b, and (da, db) written over (a, b)
@fast_launch
@triton.jit
def _swiglu_fwd(a_ptr, b_ptr, c_ptr, n, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask, other=0.0)
    b = tl.load(b_ptr + offsets, mask=mask, other=0.0)
    if not WIDE:  # float64 stays float64, everything narrower computes in float32
        a, b = a.to(tl.float32), b.to(tl.float32)
    c = a * tl.sigmoid(a) * b
    tl.store(c_ptr + offsets, c.to(c_ptr.dtype.element_ty), mask=mask)


@fast_launch
@triton.jit
def _swiglu_bwd_(dc_ptr, a_ptr, b_ptr, n, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    dc = tl.load(dc_ptr + offsets, mask=mask, other=0.0)
    a = tl.load(a_ptr + offsets, mask=mask, other=0.0)
    b = tl.load(b_ptr + offsets, mask=mask, other=0.0)
    if not WIDE:
        dc, a, b = dc.to(tl.float32), a.to(tl.float32), b.to(tl.float32)
    sig = tl.sigmoid(a)
    silu = a * sig
    # d silu(a) / da = sig + silu * (1 - sig)
    tl.store(a_ptr + offsets, (dc * b * (sig + silu * (1.0 - sig))).to(a_ptr.dtype.element_ty),
             mask=mask)  # fmt: skip
    tl.store(b_ptr + offsets, (dc * silu).to(b_ptr.dtype.element_ty), mask=mask)


# 2. the launchers (a and b: one shape, one dtype; the gradient may be any layout)
def _check_pair(qualname: str, a: torch.Tensor, b: torch.Tensor) -> None:
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ValueError(
            f"opreg: {qualname}: a and b must have one shape and dtype, got "
            f"{tuple(a.shape)} {a.dtype} and {tuple(b.shape)} {b.dtype}"
        )


def swiglu_forward(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``silu(a) * b`` through the Triton kernel, as a new contiguous tensor."""
    _check_pair("swiglu_example::swiglu", a, b)
    a, b = a.contiguous(), b.contiguous()
    c = torch.empty_like(a)
    n = a.numel()
    _swiglu_fwd[(triton.cdiv(n, BLOCK),)](
        a, b, c, n, WIDE=a.dtype == torch.float64, BLOCK=BLOCK, num_warps=NUM_WARPS
    )
    return c


def swiglu_backward_inplace(a: torch.Tensor, b: torch.Tensor, dc: torch.Tensor) -> None:
    """Overwrite ``a`` with ``dc * d(silu(a) * b)/da`` and ``b`` with ``dc * silu(a)``."""
    _check_pair("swiglu_example::swiglu_backward_", a, b)
    if a.shape != dc.shape:
        raise ValueError(
            f"opreg: swiglu_example::swiglu_backward_: the gradient has shape "
            f"{tuple(dc.shape)}, a has {tuple(a.shape)}"
        )
    a_dense, b_dense = a.contiguous(), b.contiguous()  # themselves when contiguous
    n = a.numel()
    _swiglu_bwd_[(triton.cdiv(n, BLOCK),)](
        dc.contiguous(), a_dense, b_dense, n, WIDE=a.dtype == torch.float64, BLOCK=BLOCK,
        num_warps=NUM_WARPS,
    )  # fmt: skip
    if a_dense is not a:  # a strided buffer: the gradient goes back into its own memory
        a.copy_(a_dense)
    if b_dense is not b:
        b.copy_(b_dense)


# 3. the in-place write as an op declaring its writes
def _compute_dtype(a: torch.Tensor) -> torch.dtype:
    """The kernels' arithmetic: float64 for float64, float32 for everything narrower."""
    return torch.promote_types(a.dtype, torch.float32)


def _gradients(a: torch.Tensor, b: torch.Tensor, dc: torch.Tensor) -> tuple[Any, Any]:
    af = a.to(_compute_dtype(a))
    sig = torch.sigmoid(af)
    silu = af * sig
    return dc * b * (sig + silu * (1 - sig)), dc * silu


def _backward_samples(device: torch.device) -> list[SampleInput]:
    return [
        SampleInput(tuple(torch.randn(3, 4, device=device) for _ in range(3))),
        SampleInput(tuple(torch.randn(2, 5, device=device) for _ in range(3))),
    ]


# No vmap_fn: under vmap (``vmap(grad(...))`` of ``swiglu``) opreg's per-sample loop calls the
# op on each entry's slice of a and b, a view, so each entry's write lands in the batched buffers.
@register_triton_op(
    name="swiglu_example::swiglu_backward_",
    mutates_args=("a", "b"),
    fake_fn=lambda a, b, dc: None,
    triton_fn=swiglu_backward_inplace,
    differentiable=False,
    sample_inputs=_backward_samples,
)
def swiglu_backward_(a: torch.Tensor, b: torch.Tensor, dc: torch.Tensor) -> None:
    """The in-place backward in PyTorch (the fallback off the Triton devices)."""
    _check_pair("swiglu_example::swiglu_backward_", a, b)
    da, db = _gradients(a, b, dc)
    a.copy_(da)
    b.copy_(db)


# 4. the op: its backward calls the mutating op and returns the buffers it wrote
def _setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.save_for_backward(*inputs)


def _backward(ctx: Any, dc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a, b = ctx.saved_tensors
    swiglu_backward_(a, b, dc)  # no new gradient buffers
    return a, b


def _fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _check_pair("swiglu_example::swiglu", a, b)
    return torch.empty_like(a, memory_format=torch.contiguous_format)


def _samples(device: torch.device) -> list[SampleInput]:
    return [
        SampleInput((torch.randn(3, 4, device=device), torch.randn(3, 4, device=device))),
        SampleInput((torch.randn(2, 5, device=device), torch.randn(2, 5, device=device))),
        SampleInput((torch.randn(3000, device=device), torch.randn(3000, device=device))),
    ]


@register_triton_op(
    name="swiglu_example::swiglu",
    fake_fn=_fake,
    triton_fn=swiglu_forward,
    setup_context=_setup,
    backward=_backward,
    sample_inputs=_samples,
)
def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``silu(a) * b`` in PyTorch (the fallback off the Triton devices)."""
    _check_pair("swiglu_example::swiglu", a, b)
    wide = _compute_dtype(a)
    return (torch.nn.functional.silu(a.to(wide)) * b.to(wide)).to(a.dtype).contiguous()


# 5. the hand-written Function around the same launchers (the baseline)
class SwiGLUFunction(torch.autograd.Function):
    """What a library writes today: the launchers called directly, the backward writing the
    gradients into the saved inputs through pointers."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        return swiglu_forward(a, b)

    @staticmethod
    def backward(ctx: Any, dc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = ctx.saved_tensors
        swiglu_backward_inplace(a, b, dc)
        return a, b


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """PyTorch's ``silu(a) * b``, computed in float32 and rounded once."""
    return (torch.nn.functional.silu(a.float()) * b.float()).to(a.dtype)


def use_triton_on_cpu() -> None:
    """Under ``TRITON_INTERPRET=1``: both ops run their Triton kernels on CPU tensors."""
    for op in (swiglu, swiglu_backward_):
        triton_kernel_info(op).add_device_type("cpu")


def main() -> None:
    if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        device = "cuda"
    elif os.environ.get("TRITON_INTERPRET") == "1":
        device = "cpu"
        use_triton_on_cpu()
    else:
        sys.exit("no CUDA device: run with TRITON_INTERPRET=1 to use Triton's interpreter on CPU")
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(64, 600, device=device, dtype=dtype)
        expected_grads = torch.func.grad(lambda x: reference(*x.chunk(2, 1)).float().sum())(x)
        for name, fn in (("opreg op", swiglu), ("Function", SwiGLUFunction.apply)):
            leaf = x.clone().requires_grad_()
            gate, up = (leaf * 1).chunk(2, dim=1)  # activations: the backward overwrites them
            gate, up = gate.contiguous(), up.contiguous()
            out = fn(gate, up)
            torch.testing.assert_close(out, reference(gate.detach(), up.detach()))
            out.sum().backward()
            torch.testing.assert_close(leaf.grad, expected_grads)
            print(f"{name}, {dtype}: forward and backward equal PyTorch on {device}")


if __name__ == "__main__":
    main()
