"""Smoke test of an installed opreg-core wheel, alone, with Triton absent.

Run by ``.ci/run`` in a fresh venv that holds torch and the opreg-core wheel from ``dist/``
and nothing else of opreg: registers an op and runs it in eager, vmap (nested too), grad,
vmap(grad), grad(vmap) and ``torch.compile(fullgraph=True)``, each against plain PyTorch.
Usage: ``python .ci/smoke_core.py [--compile-backend inductor|aot_eager]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import Any

import torch
from _smoke import compare, finish
from torch.func import grad, vmap

import opreg_core
from opreg_core import register_vmap_op


def _fake(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.save_for_backward(*inputs)


def _backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, w = ctx.saved_tensors
    return g * w * torch.cos(w * x), g * x * torch.cos(w * x)


def _reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.sin(w * x)


@register_vmap_op(
    name="opreg_smoke::wave",
    fake_fn=_fake,
    vmap_fn=_reference,  # the formula broadcasts over a leading batch dim
    fake_vmap_fn=_fake,
    backward=_backward,
    setup_context=_setup,
)
def wave(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """sin(w * x), element-wise."""
    return _reference(x, w)


def _environment_problems() -> list[str]:
    problems = []
    if "site-packages" not in (opreg_core.__file__ or ""):
        problems.append(f"opreg_core comes from {opreg_core.__file__}, not an installed wheel")
    for absent in ("triton", "opreg_kernels", "opreg_testing"):
        if importlib.util.find_spec(absent) is not None:
            problems.append(f"{absent} is importable: this venv must hold opreg-core alone")
    if "triton" in sys.modules:
        problems.append("importing opreg_core imported triton")
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile-backend", default="inductor")
    backend = parser.parse_args(argv).compile_backend

    problems = _environment_problems()
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, dtype=torch.float64)
    w = torch.rand(5, dtype=torch.float64)

    def each_sample(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.stack([_reference(xi, w) for xi in x])

    def loss(fn: Any) -> Any:
        return lambda x, w: fn(x, w).sum()

    cases = {
        "eager": (wave(x[0], w), _reference(x[0], w)),
        "vmap": (vmap(wave, in_dims=(0, None))(x[0], w), each_sample(x[0], w)),
        "vmap(vmap)": (
            vmap(vmap(wave, in_dims=(0, None)), in_dims=(0, None))(x, w),
            torch.stack([each_sample(xi, w) for xi in x]),
        ),
        "grad": (grad(loss(wave))(x[0], w), grad(loss(_reference))(x[0], w)),
        "vmap(grad)": (
            vmap(grad(loss(wave)), in_dims=(0, None))(x[0], w),
            vmap(grad(loss(_reference)), in_dims=(0, None))(x[0], w),
        ),
        "grad(vmap) w.r.t. w": (
            grad(lambda w: vmap(wave, in_dims=(0, None))(x[0], w).sum())(w),
            grad(lambda w: each_sample(x[0], w).sum())(w),
        ),
        f"compile({backend}) of vmap": (
            torch.compile(vmap(wave, in_dims=(0, None)), backend=backend, fullgraph=True)(x[0], w),
            each_sample(x[0], w),
        ),
    }
    problems += compare(cases, "the op differs from plain PyTorch")
    if "triton" in sys.modules:
        problems.append("running the op imported triton")
    summary = f"opreg-core {opreg_core.__version__} from {opreg_core.__file__}"
    return finish("smoke_core", problems, summary)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
