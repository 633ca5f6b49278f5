"""Accuracy of ``philox_normal_exact`` (and, for scale, ``philox_normal``) against float64, in ulp.

    python benchmarks/exact_normal_ulp.py [--log2-values 26] [--json out.json]

Runs the CPU fallbacks (the exact op gives the same bits on every device; the default op's
fallback is PyTorch's float32 log/sqrt/sin/cos, its CUDA kernel differs from it by <= 9.6e-7).
The reference takes the same float32 uniforms ``(u1, u2)`` and computes in float64
``sqrt(-2 ln max(u1, MIN_U1)) * (cos, sin)(2*pi*u2)``, with the angle reduced exactly (the
quadrant and the remainder of the 24-bit integer ``u2 * 2**24``), so the reference's own error
is ~1e-16 relative. Error in ulp: ``|z - ref| / ulp(ref)``, ``ulp(ref)`` the spacing of float32
at ``|ref|`` (a reference of exactly 0: the error must be 0). Also reported: the largest
absolute error, and the same figures for the radius and for (cos, sin) over all 2**24
possible inputs each (exhaustive: the normals are products of the two).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

import torch

from opreg_kernels import philox_normal
from opreg_kernels.ops.philox import exact
from opreg_kernels.ops.philox.reference import philox_words, words_to_uniform

CHUNK_ROWS, CHUNK_COLS = 16, 2**18


def ulp_of(ref: torch.Tensor) -> torch.Tensor:
    """float32 spacing at ``|ref|`` (float64 tensor), as float64."""
    a = ref.abs().to(torch.float32)
    return (torch.nextafter(a, torch.full_like(a, math.inf)) - a).to(torch.float64)


def ulp_error(got: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    err = (got.to(torch.float64) - ref).abs()
    return torch.where(ref == 0, torch.where(err == 0, 0.0, math.inf), err / ulp_of(ref))


def reference_cos_sin(turns: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 (cos, sin)(2*pi*turns/2**24), reduced exactly to |x| <= pi/4 first."""
    shifted = turns.to(torch.int64) + exact.HALF_QUADRANT
    q = (shifted >> exact.QUADRANT_SHIFT) & 3
    x = ((shifted & exact.QUADRANT_MASK) - exact.HALF_QUADRANT).to(torch.float64) * (
        math.pi / 2 * 2.0**-exact.QUADRANT_SHIFT
    )
    c, s = torch.cos(x), torch.sin(x)
    odd = (q & 1) == 1
    cos_t, sin_t = torch.where(odd, -s, c), torch.where(odd, c, s)
    negative = q >= 2
    return torch.where(negative, -cos_t, cos_t), torch.where(negative, -sin_t, sin_t)


def reference_radius(u1: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(-2.0 * torch.log(u1.clamp_min(exact.MIN_U1_F32).to(torch.float64)))


def reference_normals(u: torch.Tensor) -> torch.Tensor:
    """float64 normals of float32 uniforms ``u`` (pairs along the last dim, interleaved)."""
    u1, u2 = u[..., 0::2], u[..., 1::2]
    r = reference_radius(u1)
    c, s = reference_cos_sin((u2 * 2.0**24).to(torch.int64))
    return torch.stack([r * c, r * s], dim=-1).flatten(-2)


class Worst:
    def __init__(self) -> None:
        self.ulp = 0.0
        self.abs = 0.0
        self.where: Any = None

    def update(self, got: torch.Tensor, ref: torch.Tensor, where: Any) -> None:
        ulps = ulp_error(got, ref)
        i = int(ulps.flatten().argmax())
        if ulps.flatten()[i].item() > self.ulp:
            self.ulp = ulps.flatten()[i].item()
            self.where = {"at": where, "index": i, "ref": ref.flatten()[i].item()}
        self.abs = max(self.abs, (got.to(torch.float64) - ref).abs().max().item())

    def row(self) -> dict[str, Any]:
        return {"max ulp": self.ulp, "max abs": self.abs, "worst": self.where}


def exhaustive() -> dict[str, Any]:
    """The radius and (cos, sin) of the exact transform for every possible input."""
    j = torch.arange(2**24, dtype=torch.int32)
    u1 = j.to(torch.float32) * 2.0**-24
    r = exact.sqrt_rn(exact.neg_two_log(u1.clamp_min(exact.MIN_U1_F32)))
    c, s = exact.cos_sin_of_turns(j)
    rc, rs = reference_cos_sin(j)
    found = {}
    for name, got, ref in (("radius", r, reference_radius(u1)), ("cos", c, rc), ("sin", s, rs)):
        worst = Worst()
        worst.update(got, ref, name)
        found[name] = worst.row()
    torch_r = torch.sqrt(-2.0 * torch.log(u1.clamp_min(exact.MIN_U1_F32)))
    worst = Worst()
    worst.update(torch_r, reference_radius(u1), "radius")
    found["radius, PyTorch float32 log and sqrt (the default fallback)"] = worst.row()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log2-values", type=int, default=26, help="2**N samples (default 26)")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    chunks = max(1, 2**args.log2_values // (CHUNK_ROWS * CHUNK_COLS))
    worst_exact, worst_default = Worst(), Worst()
    start = time.perf_counter()
    for chunk in range(chunks):
        seeds = torch.arange(CHUNK_ROWS) + chunk * CHUNK_ROWS * 7919
        counter = chunk * 2**31  # past 2**32 from chunk 2 on
        u = words_to_uniform(philox_words(seeds, CHUNK_COLS // 4, counter))
        ref = reference_normals(u)
        got = exact.box_muller_exact(u[:, 0::2], u[:, 1::2])
        z = torch.stack(got, dim=-1).flatten(-2)
        fallback = exact.philox_normal_exact_rows(seeds[:1], 64, counter)
        assert torch.equal(fallback, z[:1, :64]), "the rows function and the transform disagree"
        worst_exact.update(z, ref, {"chunk": chunk})
        worst_default.update(philox_normal.fallback(seeds, CHUNK_COLS, counter), ref, chunk)
    values = chunks * CHUNK_ROWS * CHUNK_COLS
    result = {
        "values": values,
        "seconds": round(time.perf_counter() - start, 1),
        "philox_normal_exact": worst_exact.row(),
        "philox_normal (CPU fallback)": worst_default.row(),
        "exhaustive (2**24 inputs each)": exhaustive(),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
