"""``opreg::philox_normal_exact`` on a CUDA GPU: bit-identity with the CPU fallback, and speed.

    python benchmarks/exact_normal.py [--out result.json] [--quick]

(with the packages not installed: PYTHONPATH=packages/opreg-core/src:packages/opreg-kernels/src:
packages/opreg-testing/src; ``run_gpu.sh exact`` sets it and writes ``$OUT/exact_normal.json``).

1. Bit-identity: for each case (seeds, n, counter: counters past 2**32 and odd n included,
   at least 2**26 values each, 2**26 * 3.6 in all) the CUDA kernel's float32 bits against
   the CPU fallback's, computed in chunks of rows; the first mismatch is printed (row,
   column, seed, both values and their bits, the pair's uniforms). Also recorded: the
   fallback run on CUDA tensors (PyTorch's CUDA ops) against the CPU fallback, and the
   default ``philox_normal`` kernel's largest difference from the exact values (for scale).
2. The exact kernel's PTX: the number of ``fma`` instructions (the transform's own: 17 per
   normal pair), of approximate ``.approx`` instructions and of divisions (0 expected).
3. Throughput (GB/s of float32 output, median of ``gpu_ms`` as in ``bench_kernels.py``):
   ``torch.randn``, the default ``philox_normal`` and ``philox_normal_exact`` (the op, with
   the ``EXACT_*`` shapes, and ``launch_rows(..., exact=True)`` for a few launch shapes) on
   long rows (1024 x 2**18: 1 GiB, the shape of ``bench_kernels.py``'s table; 1024 x 2**20:
   4 GiB) and short rows (2**26 x 4). For scale: ``philox_uniform`` (the same Philox, no
   transform: the write-bound ceiling) and the exact kernel with its fused multiply-adds done
   in float64 as under the interpreter (the same bits, slower). Host time per call on a
   small output (1000 x 100), the three generators queued back to back.

Exit status: 0 if every case is bit-identical, 1 without CUDA, 2 on a mismatch.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import torch

from opreg_kernels import philox_normal, philox_uniform
from opreg_kernels.ops.philox import philox_normal_exact
from opreg_kernels.ops.philox import triton_kernels as philox

_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_ROOT / "benchmarks"))
from bench_kernels import environment, free_memory, gpu_ms, host_us  # noqa: E402

Row = dict[str, Any]

#: (name, seeds, n, counter): >= 2**26 values each.
CASES: list[tuple[str, torch.Tensor, int, int]] = [
    ("256 x 2^18, counter 0", torch.arange(256) * 7919 - 10**6, 2**18, 0),
    ("64 x 2^20, counter 2^32 - 100 (low word wraps)", torch.arange(64) * 2**33 + 5, 2**20,
     2**32 - 100),
    ("67 x 1000003 (odd n), counter 2^40 + 12345", torch.arange(67) - 2**62, 1000003,
     2**40 + 12345),
    ("2^24 x 4 (short rows), counter 7", torch.arange(2**24) * 31 - 2**62, 4, 7),
    ("2^20 x 69 (short rows, odd n), counter 2^63 - 2^20", torch.arange(2**20), 69, 2**63 - 2**20),
]  # fmt: skip
CHUNK_VALUES = 2**22
#: Where the kernel runs: "cuda", or "cpu" with ``--dry-run`` (Triton's interpreter, small cases:
#: checks this script without a GPU).
DEVICE = "cuda"
SIZES = (
    ("long rows 1024 x 2^18 (1 GiB)", 1024, 2**18),
    ("long rows 1024 x 2^20 (4 GiB)", 1024, 2**20),
    ("short rows 2^26 x 4 (1 GiB)", 2**26, 4),
)
#: launch_rows shapes timed for the exact kernel (block, num_warps, loop), long and short rows.
#: The first run (2026-12-01): long rows best at 1024 / 8 warps / loop 4, short rows at 256 / 4.
LONG_SHAPES = [(1024, 8, 4), (1024, 4, 4), (1024, 8, 2), (1024, 8, 8), (2048, 8, 4),
               (512, 8, 4), (1024, 16, 4), (2048, 16, 2)]  # fmt: skip
SHORT_SHAPES = [(256, 4, 1), (512, 4, 1), (1024, 4, 1), (128, 4, 1), (256, 8, 1), (512, 8, 1)]


def bits(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.int32)


def first_mismatch(
    got: torch.Tensor, expected: torch.Tensor, seeds: torch.Tensor, n: int, counter: int, row0: int
) -> Row | None:
    diff = (bits(got) != bits(expected)).nonzero()
    if diff.numel() == 0:
        return None
    row, col = (int(v) for v in diff[0])
    pair = col - col % 2
    u = philox_uniform.fallback(seeds[row0 + row : row0 + row + 1].cpu(), pair + 2, counter)[0]
    g, e = float(got[row, col]), float(expected[row, col])
    return {
        "row": row0 + row, "col": col, "seed": int(seeds[row0 + row]), "n": n, "counter": counter,
        "cuda": g, "cpu": e, "cuda_bits": hex(int(bits(got)[row, col]) & 0xFFFFFFFF),
        "cpu_bits": hex(int(bits(expected)[row, col]) & 0xFFFFFFFF),
        "u1": float(u[pair]), "u2": float(u[pair + 1]), "mismatches_in_chunk": int(diff.shape[0]),
    }  # fmt: skip


def check_case(name: str, seeds: torch.Tensor, n: int, counter: int) -> Row:
    rows_per_chunk = max(1, CHUNK_VALUES // max(n, 1))
    mismatches = cuda_fallback_mismatches = 0
    first: Row | None = None
    default_err = 0.0
    start = time.perf_counter()
    for row0 in range(0, len(seeds), rows_per_chunk):
        part = seeds[row0 : row0 + rows_per_chunk]
        expected = philox_normal_exact.fallback(part, n, counter)
        on_gpu = part.to(DEVICE)
        got = philox_normal_exact(on_gpu, n, counter).cpu()
        count = int((bits(got) != bits(expected)).sum())
        if count and first is None:
            first = first_mismatch(got, expected, seeds, n, counter, row0)
            print(f"  FIRST MISMATCH {name}: {first}", flush=True)
        mismatches += count
        fallback_cuda = philox_normal_exact.fallback(on_gpu, n, counter).cpu()
        cuda_fallback_mismatches += int((bits(fallback_cuda) != bits(expected)).sum())
        default = philox_normal(on_gpu, n, counter).cpu()
        default_err = max(default_err, float((default - expected).abs().max()))
        del got, expected, fallback_cuda, default, on_gpu
    if DEVICE == "cuda":
        free_memory()
    row: Row = {
        "case": name, "values": len(seeds) * n, "mismatches": mismatches,
        "first_mismatch": first, "fallback_on_cuda_mismatches": cuda_fallback_mismatches,
        "default_kernel_max_abs_diff_from_exact": default_err,
        "seconds": round(time.perf_counter() - start, 1),
    }  # fmt: skip
    print(f"  {name}: {row['values']} values, {mismatches} mismatches, fallback on CUDA "
          f"{cuda_fallback_mismatches}, default kernel max |diff| {default_err:.3g} "
          f"({row['seconds']} s)", flush=True)  # fmt: skip
    return row


def ptx_report() -> Row:
    """Compile the exact long-row kernel as the launcher does; count fma / approx in its PTX."""
    seeds = torch.arange(2, device="cuda")
    n = 4 * 4096
    out = torch.empty((2, n), device="cuda")
    compiled = philox._philox_long_rows_kernel[(2,)](
        seeds, out, n, n // 4, 1, 0, 0, NORMAL=True, WIDE=False, BLOCK=1024, LOOP=4,
        FAST_SINCOS=True, PTX_MATH=True, EXACT=True, MASKED=False, num_warps=4,
        **philox._EXACT_OPTIONS,
    )  # fmt: skip
    ptx = compiled.asm.get("ptx", "")
    report: Row = {
        "fma": len(re.findall(r"\bfma\.", ptx)),
        "approx": len(re.findall(r"\.approx", ptx)),
        "div": len(re.findall(r"\bdiv\.\w+\.f32", ptx)),
        "sqrt.rn": len(re.findall(r"\bsqrt\.rn\.f32", ptx)),
        "lines": ptx.count("\n"),
    }
    same = torch.equal(bits(out.cpu()), bits(philox_normal_exact.fallback(seeds.cpu(), n)))
    report["bit_identical"] = same
    print(f"  PTX of the exact kernel: {report}", flush=True)
    return report


def gbs(rows: int, cols: int, fn: Any) -> float:
    return float(rows * cols * 4 / gpu_ms(fn) / 1e6)


def time_size(label: str, rows: int, cols: int, quick: bool) -> Row:
    """GB/s of torch.randn, philox_normal and philox_normal_exact (op and launch shapes)."""
    seeds = torch.arange(rows, device="cuda")
    randn = gbs(rows, cols, lambda: torch.randn(rows, cols, device="cuda"))
    free_memory()
    default = gbs(rows, cols, lambda: philox_normal(seeds, cols))
    free_memory()
    exact = gbs(rows, cols, lambda: philox_normal_exact(seeds, cols))
    free_memory()
    row: Row = {
        "size": label, "randn GB/s": randn, "default GB/s": default,
        "default / randn": default / randn, "exact GB/s": exact, "exact / randn": exact / randn,
        "exact / default": exact / default,
    }  # fmt: skip
    shapes: dict[str, float] = {}
    shapes_of_size = LONG_SHAPES if cols > 4 else SHORT_SHAPES
    for block, warps, loop in shapes_of_size[:2] if quick else shapes_of_size:
        config = {"block": block, "num_warps": warps, "loop": loop}
        shapes[f"block={block} warps={warps} loop={loop}"] = gbs(
            rows, cols,
            lambda c=config: philox.launch_rows(seeds, cols, 0, normal=True, exact=True, **c),
        )  # fmt: skip
        free_memory()
    row["exact shapes GB/s"] = shapes
    print(f"  {label}: randn {randn:.0f} GB/s, default {default:.0f} ({default / randn:.2f}x), "
          f"exact {exact:.0f} ({exact / randn:.2f}x randn, {exact / default:.2f}x default); "
          f"shapes {({k: round(v) for k, v in shapes.items()})}", flush=True)  # fmt: skip
    return row


def scale_probe() -> Row:
    """For scale (1024 x 2**18, block 1024, 8 warps, loop 4): the exact kernel with the
    device's ``fma`` (as shipped) and with its fused multiply-adds in float64 (``PTX_MATH=False``,
    as under the interpreter: the same bits), and ``philox_uniform`` (no transform)."""
    rows, cols, block, loop = 1024, 2**18, 1024, 4
    seeds = torch.arange(rows, device="cuda")
    out = torch.empty((rows, cols), device="cuda")
    calls = cols // 4
    chunks = calls // (block * loop)

    def run(hw_fma: bool) -> None:
        philox._philox_long_rows_kernel[(rows * chunks,)](
            seeds, out, cols, calls, chunks, 0, 0, NORMAL=True, WIDE=False, BLOCK=block,
            LOOP=loop, FAST_SINCOS=True, PTX_MATH=hw_fma, EXACT=True, MASKED=False, num_warps=8,
            **philox._EXACT_OPTIONS,
        )  # fmt: skip

    found: Row = {f"hw_fma={f} GB/s": gbs(rows, cols, lambda f=f: run(f)) for f in (True, False)}
    run(False)
    expected = philox_normal_exact.fallback(seeds[:8].cpu(), cols)
    found["float64 fma bit-identical"] = torch.equal(bits(out[:8].cpu()), bits(expected))
    found["uniform GB/s"] = gbs(rows, cols, lambda: philox_uniform(seeds, cols))
    print(f"  exact kernel, device fma vs float64 fma; philox_uniform (1 GiB): {found}", flush=True)
    free_memory()
    return found


def host_probe() -> Row:
    """Microseconds per call on a small output (1000 x 100, an EvoX-sized population), calls
    queued back to back (``host_us``): the host's per-call time, where the kernel is short."""
    seeds = torch.arange(1000, device="cuda")
    found: Row = {
        f"{name} us/call": host_us(fn)
        for name, fn in [
            ("torch.randn", lambda: torch.randn(1000, 100, device="cuda")),
            ("philox_normal", lambda: philox_normal(seeds, 100)),
            ("philox_normal_exact", lambda: philox_normal_exact(seeds, 100)),
        ]
    }
    print(f"  host time per call, 1000 x 100: {found}", flush=True)
    return found


def throughput(quick: bool) -> list[Row]:
    found = []
    for label, rows, cols in SIZES[:1] if quick else SIZES:
        found.append(time_size(label, rows, cols, quick))
        free_memory()
    return found


def dry_run() -> int:
    """The bit-identity code path on small cases, on CPU tensors under the interpreter."""
    global DEVICE
    DEVICE = "cpu"
    if os.environ.get("TRITON_INTERPRET") != "1":
        print("exact_normal --dry-run: set TRITON_INTERPRET=1")
        return 1
    small = [(name, seeds[:3], min(n, 1001), counter) for name, seeds, n, counter in CASES]
    rows = [check_case(*case) for case in small]
    return 0 if all(r["mismatches"] == 0 and r["first_mismatch"] is None for r in rows) else 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="JSON file (default: $OUT/exact_normal.json if $OUT is set)")
    parser.add_argument("--quick", action="store_true", help="two cases, one size, two shapes")
    parser.add_argument(
        "--dry-run", action="store_true",
        help="no GPU: small cases on CPU tensors under TRITON_INTERPRET=1, no PTX, no timing",
    )  # fmt: skip
    args = parser.parse_args()
    if args.dry_run:
        return dry_run()
    out = args.out
    if out is None and "OUT" in os.environ:
        out = os.path.join(os.environ["OUT"], "exact_normal.json")
    if not torch.cuda.is_available():
        print("exact_normal: needs CUDA")
        return 1
    result: Row = {"environment": environment(), "torch_threads": torch.get_num_threads()}
    print(f"environment: {result['environment']}", flush=True)
    print("## PTX", flush=True)
    result["ptx"] = ptx_report()
    print("## bit-identity, CUDA kernel vs CPU fallback", flush=True)
    result["bit_identity"] = [check_case(*case) for case in (CASES[:2] if args.quick else CASES)]
    total = sum(r["values"] for r in result["bit_identity"])
    bad = sum(r["mismatches"] for r in result["bit_identity"])
    result["bit_identical"] = bad == 0 and result["ptx"]["bit_identical"]
    print(f"  total: {total} values, {bad} mismatches", flush=True)
    print("## throughput", flush=True)
    result["throughput"] = throughput(args.quick)
    result["scale_probe"] = scale_probe()
    result["host_probe"] = host_probe()
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=2))
        print(f"wrote {out}")
    return 0 if result["bit_identical"] else 2


if __name__ == "__main__":
    sys.exit(main())
