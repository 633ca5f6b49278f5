"""What recording a call for autograd costs, piece by piece (issue #13, part 3).

    python benchmarks/probes/profile_autograd.py [cpu|cuda]

A trivial "launcher" (``torch.empty_like``, no autograd graph of its own) is called directly,
inside a bare single-level autograd Function (the least recording can cost), the same with
``save_for_backward``, inside a ``torch.autograd.Function`` (what a user writes without
opreg), and as an opreg op with ``setup_context`` and ``backward``; the weight requires grad.
Best of 7 runs of 5000 calls, µs per call.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, cast

import torch
from torch.autograd.function import _SingleLevelFunction

from opreg_core import register_vmap_op

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: bench_core
from bench_core import best_us


def launcher(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(*inputs)


def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return g, g.sum(0)


class Bare(_SingleLevelFunction):
    @staticmethod
    def forward(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return launcher(x, w)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        return grads[0], grads[0]


class Saving(Bare):
    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(*inputs)


class Plain(torch.autograd.Function):
    @staticmethod
    def forward(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return launcher(x, w)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        return grads[0], grads[0]


def main() -> None:
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    op = register_vmap_op(
        launcher, name="profile_autograd::op", fake_fn=lambda x, w: torch.empty_like(x),
        setup_context=setup, backward=backward,
    )  # fmt: skip
    x = torch.randn(4, 64, device=device)
    w = torch.randn(64, device=device, requires_grad=True)
    base = best_us(lambda: launcher(x, w))
    print(f"{'launcher':34s} {base:7.2f} us")
    for name, fn in (
        ("bare single-level Function", lambda: cast(Any, Bare).apply(x, w)),
        ("+ save_for_backward", lambda: cast(Any, Saving).apply(x, w)),
        ("torch.autograd.Function", lambda: cast(Any, Plain).apply(x, w)),
        ("opreg op (setup_context, backward)", lambda: op(x, w)),
    ):
        us = best_us(fn)
        print(f"{name:34s} {us:7.2f} us  (+{us - base:.2f})")


if __name__ == "__main__":
    main()
