"""A tour of opreg-core: one registration, then the op in eager, vmap, nested vmap, grad, compile.

Run: ``hatch run demo`` (or ``python examples/demo.py`` with opreg-core installed).
Every line compares against plain PyTorch and the script exits non-zero on a mismatch.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch.func import grad, vmap

from opreg_core import register_vmap_op


def _fake(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.new_empty(())


def _fake_batched(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0])


def _weighted_norm_batched(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    # One leading batch dim on both inputs: reduce everything else.
    return (x * x * w).reshape(x.shape[0], -1).sum(1).sqrt()


def _setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, w = inputs
    ctx.save_for_backward(x, w, output)


def _backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, w, out = ctx.saved_tensors
    return g * x * w / out, g * x * x / (2 * out)


@register_vmap_op(
    fake_fn=_fake,
    vmap_fn=_weighted_norm_batched,
    fake_vmap_fn=_fake_batched,
    backward=_backward,
    setup_context=_setup,
    name="opreg_demo::weighted_norm",
)
def weighted_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """sqrt(sum(w * x**2)): a weighted L2 norm."""
    return (x * x * w).sum().sqrt()


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x * x * w).sum().sqrt()


def main() -> int:
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, dtype=torch.float64)
    w = torch.rand(5, dtype=torch.float64)
    failures = 0

    def show(label: str, got: torch.Tensor, expected: torch.Tensor, note: str = "") -> None:
        nonlocal failures
        ok = got.shape == expected.shape and torch.allclose(got, expected)
        failures += not ok
        print(f"  {'ok ' if ok else 'BAD'} {label:<34} shape {tuple(got.shape)!s:<12} {note}")

    print(f"opreg op {weighted_norm.qualname}{weighted_norm.schema}")
    print(f"  also reachable as torch.ops.opreg_demo.weighted_norm: {weighted_norm.overload}")
    show("eager", weighted_norm(x[0, 0], w), reference(x[0, 0], w))

    weighted_norm.vmap_stats.reset()
    show(
        "vmap",
        vmap(weighted_norm, in_dims=(0, None))(x[0], w),
        vmap(reference, in_dims=(0, None))(x[0], w),
        f"({weighted_norm.vmap_stats})",
    )
    weighted_norm.vmap_stats.reset()
    nested = vmap(vmap(weighted_norm, in_dims=(1, None)), in_dims=(0, None))
    xt = x.transpose(1, 2)  # (4, 5, 3): the inner vmap maps over its last dim
    show(
        "vmap(vmap), in_dims 1 inside",
        nested(xt, w),
        vmap(vmap(reference, in_dims=(1, None)), in_dims=(0, None))(xt, w),
        f"({weighted_norm.vmap_stats})",
    )

    show("grad", grad(weighted_norm)(x[0, 0], w), grad(reference)(x[0, 0], w))
    show(
        "vmap(grad)",
        vmap(grad(weighted_norm), in_dims=(0, None))(x[0], w),
        vmap(grad(reference), in_dims=(0, None))(x[0], w),
    )
    show(
        "grad(vmap), w.r.t. the weights",
        grad(lambda w: vmap(weighted_norm, in_dims=(0, None))(x[0], w).sum())(w),
        grad(lambda w: vmap(reference, in_dims=(0, None))(x[0], w).sum())(w),
    )

    compiled = torch.compile(
        lambda x, w: vmap(weighted_norm, in_dims=(0, None))(x, w) * 2, fullgraph=True
    )
    show(
        "torch.compile(fullgraph) of vmap",
        compiled(x[0], w),
        vmap(reference, in_dims=(0, None))(x[0], w) * 2,
    )

    xr = x[0, 0].clone().requires_grad_()
    wr = w.clone().requires_grad_()
    ok = torch.autograd.gradcheck(weighted_norm, (xr, wr))
    failures += not ok
    print(f"  {'ok ' if ok else 'BAD'} gradcheck (float64)")
    print("all good" if not failures else f"{failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
