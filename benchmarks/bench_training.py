"""A training step's host cost: an opreg op against a hand-written ``torch.autograd.Function``
around the same computation (what Liger-Kernel, FlashAttention and Unsloth write), issue #24.

    python benchmarks/bench_training.py [--device cpu|cuda] [--rounds 41] [--number 2000]
                                        [--json PATH]

Tiny tensors, so that the host is the limit. Two signatures, each written three ways from the
same forward and backward functions: the plain eager computation (no Function: what autograd
costs by itself), a hand-written Function (``forward(ctx, ...)``/``backward(ctx, ...)``, as
the libraries above write it), and an opreg op (``register_vmap_op`` with ``backward`` and
``setup_context``):

- ``1 tensor``: ``square(x) = x * x``;
- ``6 arguments``: an RMSNorm-like ``rms_norm(x, w, eps, offset, scale, cast)`` (2 tensors,
  4 scalars);
- ``list of 3``: ``weighted_sum(xs, w) = (xs[0] + xs[1] + xs[2]) * w``, a ``Tensor[]`` of three
  and a tensor. A Function cannot see the tensors in a list, so the hand-written one takes
  them spread, ``apply(w, *xs)``, as its authors write it.

Rows, for each signature: ``no grad`` (no input requires grad), ``forward`` (the inputs
require grad: the call is recorded) and ``forward + backward`` (``out.backward(g)`` after
each call). Ratios ``opreg / Function`` in the same run (issue #24's targets: no grad
<= 1.05, forward <= 1.10, forward + backward <= 1.05). Timing: ``bench_core``'s interleaved
blocks, median of ``--rounds``. On CUDA the host is the limit for these sizes (each call
costs the host more than the GPU), so the queue stays short without a synchronisation.
"""

from __future__ import annotations

import argparse
import platform
from collections.abc import Callable
from typing import Any

import torch

import opreg_core
from bench_core import median_us, write_json  # this folder's timer (run as python benchmarks/...)
from opreg_core import register_vmap_op

Row = dict[str, Any]
TARGETS = {"no grad": 1.05, "forward": 1.10, "forward + backward": 1.05}


# --- 1 tensor: square(x) = x * x
def square_fwd(x: torch.Tensor) -> torch.Tensor:
    return x * x


def square_bwd(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    return 2 * x * g


class SquareFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x)
        return square_fwd(x)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        return square_bwd(x, g)


def _square_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(inputs[0])


def _square_backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
    (x,) = ctx.saved_tensors
    return square_bwd(x, g)


# --- 6 arguments: rms_norm(x, w, eps, offset, scale, cast); both sides save the inputs and
# recompute the inverse RMS in the backward (the same work on each side).
def _rstd(x: torch.Tensor, eps: float, cast: bool) -> torch.Tensor:
    xf = x.float() if cast else x
    return torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)


def rms_fwd(
    x: torch.Tensor, w: torch.Tensor, eps: float, offset: float, scale: float, cast: bool
) -> torch.Tensor:
    xf = x.float() if cast else x
    return (xf * _rstd(x, eps, cast) * (w + offset) * scale).to(x.dtype)


def rms_bwd(
    x: torch.Tensor, w: torch.Tensor, eps: float, offset: float, scale: float, cast: bool,
    g: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Gradients of x and w."""
    rstd = _rstd(x, eps, cast)
    wg = g * (w + offset) * scale
    xhat = x * rstd
    dx = rstd * (wg - xhat * (wg * xhat).mean(-1, keepdim=True))
    dw = (g * xhat * scale).reshape(-1, x.shape[-1]).sum(0)
    return dx, dw


class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, x: torch.Tensor, w: torch.Tensor, eps: float, offset: float, scale: float,
        cast: bool,
    ) -> torch.Tensor:  # fmt: skip
        ctx.save_for_backward(x, w)
        ctx.scalars = eps, offset, scale, cast
        return rms_fwd(x, w, eps, offset, scale, cast)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        x, w = ctx.saved_tensors
        dx, dw = rms_bwd(x, w, *ctx.scalars, g)
        return dx, dw, None, None, None, None


def _rms_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, w, *scalars = inputs
    ctx.save_for_backward(x, w)
    ctx.scalars = scalars


def _rms_backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
    x, w = ctx.saved_tensors
    dx, dw = rms_bwd(x, w, *ctx.scalars, g)
    return dx, dw, None, None, None, None


# --- list of 3: weighted_sum(xs, w) = sum(xs) * w
def wsum_fwd(xs: list[torch.Tensor], w: torch.Tensor) -> torch.Tensor:
    total = xs[0]
    for x in xs[1:]:
        total = total + x
    return total * w


def wsum_bwd(xs: list[torch.Tensor], w: torch.Tensor, g: torch.Tensor) -> tuple[Any, ...]:
    """Gradients of the list (one per element) and of w."""
    gx = g * w
    return [gx] * len(xs), (g * wsum_fwd(xs, torch.ones_like(w))).sum(0)


class WeightedSumFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, w: torch.Tensor, *xs: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(w, *xs)
        return wsum_fwd(list(xs), w)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        w, *xs = ctx.saved_tensors
        gxs, gw = wsum_bwd(xs, w, g)
        return (gw, *gxs)


def _wsum_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    xs, w = inputs
    ctx.save_for_backward(w, *xs)


def _wsum_backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
    w, *xs = ctx.saved_tensors
    return wsum_bwd(xs, w, g)


def build(namespace: str = "opreg_bench_training") -> dict[str, dict[str, Callable[..., Any]]]:
    """Per signature: the eager computation, the Function and the opreg op."""
    square = register_vmap_op(
        square_fwd,
        name=f"{namespace}::square",
        fake_fn=torch.empty_like,
        backward=_square_backward,
        setup_context=_square_setup,
    )
    rms = register_vmap_op(
        rms_fwd,
        name=f"{namespace}::rms_norm",
        fake_fn=lambda x, w, eps, offset, scale, cast: torch.empty_like(x),
        backward=_rms_backward,
        setup_context=_rms_setup,
    )
    wsum = register_vmap_op(
        wsum_fwd,
        name=f"{namespace}::weighted_sum",
        fake_fn=lambda xs, w: torch.empty_like(xs[0]),
        backward=_wsum_backward,
        setup_context=_wsum_setup,
    )

    def wsum_function(xs: list[torch.Tensor], w: torch.Tensor) -> torch.Tensor:
        return WeightedSumFunction.apply(w, *xs)  # type: ignore[no-any-return]

    return {
        "1 tensor": {"eager": square_fwd, "Function": SquareFunction.apply, "opreg": square},
        "6 arguments": {"eager": rms_fwd, "Function": RMSNormFunction.apply, "opreg": rms},
        "list of 3": {"eager": wsum_fwd, "Function": wsum_function, "opreg": wsum},
    }


def _inputs(signature: str, device: str, grad: bool) -> tuple[Any, ...]:
    x = torch.randn(4, 64, device=device, requires_grad=grad)
    if signature == "1 tensor":
        return (x,)
    w = torch.rand(64, device=device, requires_grad=grad)
    if signature == "list of 3":
        rest = [torch.randn(4, 64, device=device, requires_grad=grad) for _ in range(2)]
        return ([x, *rest], w)
    return (x, w, 1e-6, 1.0, 0.5, True)


def _thunks(
    fns: dict[str, Callable[..., Any]], args: tuple[Any, ...], backward: bool
) -> dict[str, Callable[[], Any]]:
    """One thunk per contender; with ``backward``, each call is followed by ``.backward``."""
    grad = torch.ones_like(fns["eager"](*args)) if backward else None

    def thunk(fn: Callable[..., Any]) -> Callable[[], Any]:
        if grad is None:
            return lambda: fn(*args)

        def step() -> None:
            fn(*args).backward(grad)

        return step

    return {name: thunk(fn) for name, fn in fns.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=41, help="timed blocks per case")
    parser.add_argument("--number", type=int, default=2000, help="calls per block")
    parser.add_argument("--json", metavar="PATH", help="also write the results to PATH")
    args = parser.parse_args()
    torch.set_num_threads(1)
    signatures = build()
    results: list[Row] = []
    print(
        f"opreg-core {opreg_core.__version__} | torch {torch.__version__} | Python "
        f"{platform.python_version()} | {platform.machine()} | device {args.device} | "
        f"1 thread | median of {args.rounds} blocks of {args.number} calls"
    )
    print(
        f"| {'signature':<11} | {'path':<18} | {'eager us':>8} | {'Function us':>11} "
        f"| {'opreg us':>8} | {'opreg/Function':>14} | target |"
    )
    print(f"|{'-' * 13}|{'-' * 20}|{'-' * 10}|{'-' * 13}|{'-' * 10}|{'-' * 16}|--------|")
    for signature, fns in signatures.items():
        for path, grad, backward in (
            ("no grad", False, False),
            ("forward", True, False),
            ("forward + backward", True, True),
        ):
            inputs = _inputs(signature, args.device, grad)
            us = median_us(_thunks(fns, inputs, backward), args.number, args.rounds)
            ratio = us["opreg"] / us["Function"]
            target = TARGETS[path]
            print(
                f"| {signature:<11} | {path:<18} | {us['eager']:8.2f} | {us['Function']:11.2f} "
                f"| {us['opreg']:8.2f} | {ratio:14.3f} | <= {target:.2f} |"
            )
            results.append({"signature": signature, "path": path, **us, "ratio": ratio})
    if args.json:
        write_json(args.json, "bench_training", vars(args), results)


if __name__ == "__main__":
    main()
