"""Smoke test of an installed opreg-kernels wheel without its ``triton`` extra.

Run by ``.ci/run`` in a fresh venv holding torch and the opreg-core and opreg-kernels wheels
from ``dist/``, Triton absent: ``has_triton()`` is False, and every shipped op runs its
PyTorch fallback and gives the right numbers (Philox against the Random123 known answer).
"""

from __future__ import annotations

import importlib.util
import math
import sys

import torch
from _smoke import compare, finish
from torch.func import grad, vmap

import opreg_kernels
from opreg_kernels import fused_add, has_triton, philox_normal, philox_uniform, triton_kernel_info

#: Philox4x32-10, key (0, 0), counter (0, 0, 0, 0): Random123's known-answer test vector.
PHILOX_KAT = (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)


def _box_muller(u: torch.Tensor) -> torch.Tensor:
    u1, u2 = u[..., 0::2].double(), u[..., 1::2].double()
    r = torch.sqrt(-2 * torch.log(u1.clamp_min(1e-10)))
    return torch.stack([r * torch.cos(2 * math.pi * u2), r * torch.sin(2 * math.pi * u2)], -1)


def main() -> int:
    problems = []
    if "site-packages" not in (opreg_kernels.__file__ or ""):
        problems.append(f"opreg_kernels comes from {opreg_kernels.__file__}, not a wheel")
    for absent in ("triton", "opreg_testing"):
        if importlib.util.find_spec(absent) is not None:
            problems.append(f"{absent} is importable: this venv must not hold it")
    if has_triton():
        problems.append("has_triton() is True without Triton")

    torch.manual_seed(0)
    x, y = torch.randn(3, 5), torch.randn(3, 5)
    seeds = torch.tensor([0, 1, -1, 2**40 + 7], dtype=torch.int64)
    uniforms = philox_uniform(seeds, 8)
    expected_kat = torch.tensor([(w >> 8) * 2.0**-24 for w in PHILOX_KAT])
    cases = {
        "fused_add": (fused_add(x, y), x + y),
        "vmap(fused_add)": (vmap(fused_add)(x, y), x + y),
        "grad(fused_add) w.r.t. y": (
            grad(lambda y: fused_add(x, y).pow(2).sum())(y),
            2 * (x + y),
        ),
        "philox_uniform: Random123 known answer": (uniforms[0, :4], expected_kat),
        "philox_uniform: row by row": (philox_uniform(seeds[2:3], 8)[0], uniforms[2]),
        "philox_normal: Box-Muller of the uniforms": (
            philox_normal(seeds, 8).double(),
            _box_muller(uniforms).flatten(-2),
        ),
        "vmap(philox_uniform)": (
            vmap(philox_uniform, in_dims=(0, None))(seeds.reshape(2, 2), 8),
            uniforms.reshape(2, 2, 8),
        ),
    }
    problems += compare(cases, "wrong result", atol=1e-5)
    for op in (fused_add, philox_uniform, philox_normal):
        print(f"  {triton_kernel_info(op)}")
    if "triton" in sys.modules:
        problems.append("running the shipped ops imported triton")
    summary = f"opreg-kernels {opreg_kernels.__version__} (fallbacks, no Triton)"
    return finish("smoke_kernels", problems, summary)


if __name__ == "__main__":
    sys.exit(main())
