"""An autotuned Triton RMSNorm whose backward is a Triton kernel too, as two opreg ops.

Run: ``python examples/triton_rmsnorm.py`` on a CUDA machine, or
``TRITON_INTERPRET=1 python examples/triton_rmsnorm.py`` on CPU (Triton's interpreter; each
autotune config then runs once and the configs must agree). Needs opreg-kernels with Triton.
Every result is compared with PyTorch and the script exits non-zero on a mismatch.

The pattern (docs/triton.md, "Autotuned kernels and Triton backwards"):

1. the forward kernel, ``@triton.autotune`` over launch configs, with ``@triton.heuristics``
   for the block size (one program per row, the whole row in one block), wrapped in
   ``fast_launch`` so that a launch costs what the shipped ops' launches cost;
2. the backward kernel, ``@triton.heuristics`` + ``@triton.jit``, also through ``fast_launch``;
3. the backward registered as its own op (``register_triton_op``), with a PyTorch fallback:
   a backward that launched Triton itself would fail under ``torch.func.grad``, ``vmap`` of
   it and ``torch.compile`` (opreg refuses it there, naming the op);
4. the forward op, whose ``backward`` calls the backward op; both ops are registered with
   ``compiler_visible=True``, so on CUDA ``torch.compile`` sees the Triton kernels themselves
   (a ``fast_launch`` kernel launches through ``torch.library.wrap_triton`` when traced);
5. use: eager, ``torch.func.grad``, ``torch.compile``, and on CUDA a CUDA graph capture after
   one warm-up call (the first call tunes; tuning cannot happen inside a capture).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
import triton
import triton.language as tl

from opreg_kernels import fast_launch, register_triton_op, triton_kernel_info


# 1. the forward kernel: y = x / sqrt(mean(x^2) + eps) * w, one program per row
@fast_launch
@triton.autotune(
    configs=[triton.Config({}, num_warps=w) for w in (1, 2, 4, 8)],
    key=["n_cols"],  # tune again for each row length
)
@triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["n_cols"])})
@triton.jit
def _rms_norm_fwd(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * n_cols
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(y_ptr + row + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


# 2. the backward kernel: dx per row, and each row's share of dw (summed by the launcher)
@fast_launch
@triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["n_cols"])})
@triton.jit
def _rms_norm_bwd(g_ptr, x_ptr, w_ptr, dx_ptr, dw_rows_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * n_cols
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    g = tl.load(g_ptr + row + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + row + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    gw = g * w
    dx = rstd * gw - x * (rstd * rstd * rstd) * (tl.sum(gw * x, axis=0) / n_cols)
    tl.store(dx_ptr + row + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    tl.store(dw_rows_ptr + row + cols, g * x * rstd, mask=mask)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """x as a contiguous (rows, n_cols) matrix."""
    return x.contiguous().view(-1, x.shape[-1])


# 3. the backward as its own op: launcher, PyTorch fallback, registration
def rms_norm_backward_launcher(
    g: torch.Tensor, x: torch.Tensor, w: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    g2, x2 = _rows(g), _rows(x)
    dx = torch.empty_like(x2)
    dw_rows = torch.empty(x2.shape, dtype=torch.float32, device=x.device)
    _rms_norm_bwd[(x2.shape[0],)](g2, x2, w.contiguous(), dx, dw_rows, x2.shape[1], eps)
    return dx.view(x.shape), dw_rows.sum(0).to(w.dtype)


def _fake_backward(
    g: torch.Tensor, x: torch.Tensor, w: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape), w.new_empty(w.shape)


@register_triton_op(
    name="rmsnorm_example::rms_norm_backward",
    fake_fn=_fake_backward,
    triton_fn=rms_norm_backward_launcher,
    compiler_visible=True,
)
def rms_norm_backward(
    g: torch.Tensor, x: torch.Tensor, w: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dw) of rms_norm, in PyTorch (the fallback off the Triton devices)."""
    x32, gw = x.float(), (g * w).float()
    rstd = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    mean_gwx = (gw * x32).mean(-1, keepdim=True)
    dx = rstd * gw - x32 * rstd.pow(3) * mean_gwx
    dw = (g.float() * x32 * rstd).reshape(-1, x.shape[-1]).sum(0)
    return dx.to(x.dtype).contiguous(), dw.to(w.dtype)


# 4. the forward op: its backward calls the backward op (never a launcher directly)
def rms_norm_launcher(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x2 = _rows(x)
    y = torch.empty_like(x2)
    _rms_norm_fwd[(x2.shape[0],)](x2, w.contiguous(), y, x2.shape[1], eps)
    return y.view(x.shape)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, w, eps = inputs
    ctx.save_for_backward(x, w)
    ctx.eps = eps


def _backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
    x, w = ctx.saved_tensors
    dx, dw = rms_norm_backward(g, x, w, ctx.eps)
    return dx, dw, None


@register_triton_op(
    name="rmsnorm_example::rms_norm",
    fake_fn=lambda x, w, eps: x.new_empty(x.shape),
    triton_fn=rms_norm_launcher,
    setup_context=_setup,
    backward=_backward,
    compiler_visible=True,
)
def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2, -1) + eps) * w, in PyTorch (the fallback off the Triton devices)."""
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps).contiguous()


def _device() -> str:
    if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        return "cuda"
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("no CUDA device: run with TRITON_INTERPRET=1 to use Triton's interpreter on CPU")
    for op in (rms_norm, rms_norm_backward):  # the interpreter runs the kernels on CPU tensors
        triton_kernel_info(op).add_device_type("cpu")
    return "cpu"


def main() -> None:
    device = _device()
    eps = 1e-6
    x = torch.randn(64, 300, device=device)
    w = torch.rand(300, device=device) + 0.5

    # 5. eager: the first call tunes (on CPU: every config once, compared), then it is cached
    expected = torch.nn.functional.rms_norm(x, (300,), w, eps)
    torch.testing.assert_close(rms_norm(x, w, eps), expected)

    # gradients: .backward() and torch.func.grad both run the backward op's Triton kernel
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    torch.nn.functional.rms_norm(xr, (300,), wr, eps).pow(2).sum().backward()
    dx, dw = torch.func.grad(lambda x, w: rms_norm(x, w, eps).pow(2).sum(), argnums=(0, 1))(x, w)
    torch.testing.assert_close(dx, xr.grad)
    torch.testing.assert_close(dw, wr.grad, rtol=1e-4, atol=1e-4)

    # torch.compile: on CUDA the graph holds the Triton kernels themselves (compiler-visible
    # ops); elsewhere the ops stay whole operators and run what eager runs
    compiled = torch.compile(lambda x, w: rms_norm(x, w, eps) * 2, fullgraph=True)
    torch.testing.assert_close(compiled(x, w), expected * 2)

    if device == "cuda":  # a CUDA graph capture after the warm-up call above
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = rms_norm(x, w, eps)
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(y, torch.nn.functional.rms_norm(x, (300,), w, eps))
    print(
        f"rms_norm on {device}: forward, grad, compile" + (", capture" if device == "cuda" else "")
    )
    print("  forward config chosen:", _rms_norm_fwd.kernel.best_config)
    print(
        "  fast launches (forward, backward):", _rms_norm_fwd.fast_calls, _rms_norm_bwd.fast_calls
    )


if __name__ == "__main__":
    main()
