"""Benchmarks of opreg-kernels: import cost, kernel bandwidth and per-call host overhead.

    python benchmarks/bench_kernels.py                  # every section this machine can run
    python benchmarks/bench_kernels.py --sections import
    python benchmarks/bench_kernels.py --sweep --json out.json

Sections (all measured in one run, side by side):
  import     what ``import opreg_kernels`` adds to ``import torch`` (fresh interpreters)
  bandwidth  fused_add vs torch.add at 1 GiB per tensor; philox_uniform / philox_normal /
             philox_normal_exact writing 1 GiB vs torch.rand / torch.randn of the same shape
             (CUDA)
  overhead   host time per call on tiny CUDA tensors: the opreg op vs launching the same
             Triton kernel directly, vs its launcher function, vs custom_op+register_kernel
  accuracy   philox_uniform bit-identity and philox_normal max error, CUDA vs CPU fallback;
             philox_normal_exact's mismatches (0 expected: bit-identical)
  cpu        the Philox fallbacks on CPU tensors (16 x 2^20 normals) vs torch.randn on CPU
             (runs without CUDA; ``--threads`` sets torch's CPU threads)
  sweep      (with --sweep) block size / warps of the kernels, to choose the defaults
Timings are medians; GPU times come from CUDA events around each call. Host times are
taken in interleaved rounds (every row once per round) and ratios are medians of the ratios
within a round (``host_us_rounds``): the host's speed drifts over seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch

GIB = 2**30
Row = dict[str, Any]


# -- helpers -----------------------------------------------------------------------------------
#: GPU cycles of busy work queued before each timed call (~0.1 ms on an H200).
_HEAD_START_CYCLES = 200_000


def gpu_ms(fn: Callable[[], Any], iters: int = 20, warmup: int = 3) -> float:
    """Median GPU time of one call, in milliseconds.

    The events time the kernel, not the host: each call is queued behind a short busy kernel
    (``torch.cuda._sleep``), so the start event fires only once the call's own kernels are
    queued. Timed on an idle GPU, the start event would fire at once and the measurement
    would include the call's host time (Python dispatch, the launcher) before its kernel
    starts: ~5 % of a 1 GiB add for an op with a Python autograd kernel.
    """
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(_HEAD_START_CYCLES)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def host_us(fn: Callable[[], Any], calls: int = 2000, repeats: int = 15) -> float:
    """Median host time of one call, in microseconds (calls are queued, not synchronised)."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def host_us_rounds(
    fns: Sequence[Callable[[], Any]],
    calls: int = 2000,
    rounds: int = 15,
    contexts: Sequence[Callable[[], AbstractContextManager[Any]]] | None = None,
) -> list[list[float]]:
    """Host time of one call of each function, in microseconds, per round (``[fn][round]``).

    Each round times every function for ``calls`` queued calls, one function after the other
    (the GPU synchronised in between), so that a host whose speed drifts over seconds (rows
    timed a few seconds apart by :func:`host_us` differed by up to 30 % on the H200 hosts)
    slows the functions of one round alike: compare two functions by :func:`median_ratio`.
    ``contexts[i]()`` (e.g. ``torch.inference_mode``) is entered around function i's calls.
    Without CUDA (CPU tensors) there is nothing to synchronise.
    """
    enter = contexts or [contextlib.nullcontext] * len(fns)
    sync: Callable[[], None] = torch.cuda.synchronize if torch.cuda.is_available() else _no_sync
    for fn, context in zip(fns, enter, strict=True):
        with context():
            for _ in range(50):
                fn()
    sync()
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for fn, context, out in zip(fns, enter, samples, strict=True):
            with context():
                start = time.perf_counter()
                for _ in range(calls):
                    fn()
                out.append((time.perf_counter() - start) / calls * 1e6)
            sync()
    return samples


def _no_sync() -> None:
    """Nothing to wait for (no CUDA)."""


def median_ratio(samples: Sequence[float], reference: Sequence[float]) -> float:
    """The median over rounds of ``samples[r] / reference[r]`` (see :func:`host_us_rounds`)."""
    return statistics.median(a / b for a, b in zip(samples, reference, strict=True))


def free_memory() -> None:
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def print_table(title: str, rows: list[Row], columns: list[str]) -> None:
    print(f"\n## {title}\n")
    widths = {c: max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns}
    print("| " + " | ".join(c.ljust(widths[c]) for c in columns) + " |")
    print("|" + "|".join("-" * (widths[c] + 2) for c in columns) + "|")
    for r in rows:
        print("| " + " | ".join(_fmt(r.get(c)).ljust(widths[c]) for c in columns) + " |")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return "" if value is None else str(value)


# -- sections ----------------------------------------------------------------------------------
def bench_import(repeats: int = 15) -> list[Row]:
    """What importing opreg adds once torch is imported, in fresh interpreters (median)."""
    code = (
        "import time, torch; t = time.perf_counter(); import {module}; "
        "print((time.perf_counter() - t) * 1e3)"
    )

    def run(module: str) -> float:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        command = [sys.executable, "-c", code.format(module=module)]
        out = subprocess.run(command, check=True, env=env, capture_output=True, text=True).stdout
        return float(out.strip().splitlines()[-1])

    run("opreg_kernels")  # warm the file cache and the .pyc files
    rows = []
    for module in ("opreg_core", "opreg_kernels"):
        samples = [run(module) for _ in range(repeats)]
        rows.append({
            "import (after torch)": module,
            "median ms": statistics.median(samples),
            "min ms": min(samples),
            "target ms": "<= 50" if module == "opreg_kernels" else "",
        })  # fmt: skip
    print_table("import time added to `import torch`", rows, list(rows[0]))
    return rows


def bench_bandwidth() -> list[Row]:
    rows = [_add_bandwidth()]
    free_memory()  # each helper's tensors are gone once it returns
    for label, seeds, cols in (
        ("long rows 1024 x 2^18", 1024, 2**18),
        ("short rows 2^26 x 4", 2**26, 4),
    ):
        rows += _philox_bandwidth(label, seeds, cols)
        free_memory()
    print_table(
        "bandwidth (GB/s = bytes moved / median kernel time)",
        rows,
        ["op", "ours ms", "ours GB/s", "baseline", "base ms", "base GB/s", "speedup", "target"],
    )
    return rows


def _add_bandwidth() -> Row:
    from opreg_kernels import fused_add

    x = torch.randn(GIB // 4, device="cuda")
    y = torch.randn(GIB // 4, device="cuda")
    moved = 3 * GIB  # read x, read y, write the result
    t_torch = gpu_ms(lambda: torch.add(x, y))
    t_ours = gpu_ms(lambda: fused_add(x, y))
    return _bw_row("fused_add 1 GiB/tensor", "torch.add", moved, t_ours, t_torch, 0.98)


def _philox_bandwidth(label: str, rows: int, cols: int) -> list[Row]:
    """philox_uniform / philox_normal writing ``rows x cols`` float32 vs torch.rand / randn."""
    from opreg_kernels import philox_normal, philox_uniform
    from opreg_kernels.ops.philox import philox_normal_exact

    seeds = torch.arange(rows, device="cuda")
    t_rand = gpu_ms(lambda: torch.rand(rows, cols, device="cuda"))
    t_uni = gpu_ms(lambda: philox_uniform(seeds, cols))
    t_randn = gpu_ms(lambda: torch.randn(rows, cols, device="cuda"))
    t_norm = gpu_ms(lambda: philox_normal(seeds, cols))
    t_exact = gpu_ms(lambda: philox_normal_exact(seeds, cols))
    free_memory()
    nbytes = rows * cols * 4
    return [
        _bw_row(f"philox_uniform {label}", "torch.rand", nbytes, t_uni, t_rand, 1.4),
        _bw_row(f"philox_normal {label}", "torch.randn", nbytes, t_norm, t_randn, 1.5),
        _bw_row(f"philox_normal_exact {label}", "torch.randn", nbytes, t_exact, t_randn, 1.3),
    ]


def _bw_row(op: str, baseline: str, nbytes: int, ours: float, base: float, target: float) -> Row:
    return {
        "op": op,
        "ours ms": ours,
        "ours GB/s": nbytes / ours / 1e6,
        "baseline": baseline,
        "base ms": base,
        "base GB/s": nbytes / base / 1e6,
        "speedup": base / ours,
        "target": f">= {target}",
        "met": base / ours >= target,
    }


def bench_overhead() -> list[Row]:
    """Host time per call on tiny tensors (16 elements, 2 seeds x 8 values)."""
    import triton

    from opreg_kernels import fused_add, philox_uniform
    from opreg_kernels.ops.fused_add import triton_kernels as add_kernels
    from opreg_kernels.ops.philox import triton_kernels as philox_kernels

    x = torch.randn(16, device="cuda")
    seeds = torch.arange(2, device="cuda")
    add_kernel = add_kernels._add_kernel
    block, warps = add_kernels.DEFAULT_BLOCK, add_kernels.DEFAULT_NUM_WARPS

    def raw_add() -> torch.Tensor:  # what a user writes without any op registration
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(16, block),)](
            x, x, out, 16, WIDE=False, BLOCK=block, EVICT=add_kernels.DEFAULT_EVICT, num_warps=warps
        )
        return out

    philox_kernel = philox_kernels._philox_short_rows_kernel

    def raw_philox() -> torch.Tensor:
        out = torch.empty((2, 8), dtype=torch.float32, device="cuda")
        philox_kernel[(1,)](
            seeds, out, 8, 2, 4, 0, 0, NORMAL=False, WIDE=False,
            BLOCK=philox_kernels.DEFAULT_BLOCK, FAST_SINCOS=philox_kernels.DEFAULT_FAST_SINCOS,
            PTX_MATH=False, num_warps=philox_kernels.DEFAULT_NUM_WARPS,
        )  # fmt: skip
        return out

    add_custom, add_custom_grad, uniform_custom = _custom_ops(
        add_kernels.launch, philox_kernels.launch_uniform
    )
    cases: list[tuple[str, str, Callable[[], Any]]] = [
        ("fused_add", "direct Triton launch", raw_add),
        ("fused_add", "launcher function", lambda: add_kernels.launch(x, x)),
        ("fused_add", "opreg op (with backward)", lambda: fused_add(x, x)),
        ("fused_add", "custom_op + register_kernel", lambda: add_custom(x, x)),
        ("fused_add", "... + register_autograd", lambda: add_custom_grad(x, x)),
        ("fused_add", "torch.add (reference)", lambda: torch.add(x, x)),
        ("philox_uniform", "direct Triton launch", raw_philox),
        ("philox_uniform", "launcher function", lambda: philox_kernels.launch_uniform(seeds, 8)),
        ("philox_uniform", "opreg op (differentiable=False)", lambda: philox_uniform(seeds, 8)),
        ("philox_uniform", "custom_op + register_kernel", lambda: uniform_custom(seeds, 8)),
        ("philox_uniform", "torch.rand (reference)", lambda: torch.rand(2, 8, device="cuda")),
    ]
    assert torch.equal(raw_add(), fused_add(x, x))
    assert torch.equal(raw_philox(), philox_uniform(seeds, 8))
    rows: list[Row] = []
    samples = host_us_rounds([fn for _, _, fn in cases])
    direct: dict[str, list[float]] = {}
    for (op, how, _), times in zip(cases, samples, strict=True):
        direct.setdefault(op, times)
        rows.append(
            {
                "op": op, "call": how, "us/call": statistics.median(times),
                "vs direct": median_ratio(times, direct[op]),
            }
        )  # fmt: skip
    print_table(
        "host overhead per call, tiny CUDA tensors", rows, ["op", "call", "us/call", "vs direct"]
    )
    return rows


def _custom_ops(
    add_launcher: Callable[..., Any], uniform_launcher: Callable[..., Any]
) -> tuple[Any, Any, Any]:
    """torch.library.custom_op versions of the ops with the same CUDA launchers."""
    lib = "opreg_bench"

    @torch.library.custom_op(f"{lib}::add", mutates_args=())
    def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y

    @torch.library.custom_op(f"{lib}::add_grad", mutates_args=())
    def add_grad(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y

    @torch.library.custom_op(f"{lib}::uniform", mutates_args=())
    def uniform(seeds: torch.Tensor, n: int, counter: int = 0) -> torch.Tensor:
        raise NotImplementedError

    for op in (add, add_grad):
        op.register_fake(lambda x, y: torch.empty_like(x))
        op.register_kernel("cuda")(add_launcher)
    add_grad.register_autograd(lambda ctx, g: (g, g))
    uniform.register_fake(
        lambda seeds, n, counter=0: seeds.new_empty((seeds.shape[0], n), dtype=torch.float32)
    )
    uniform.register_kernel("cuda")(uniform_launcher)
    return add, add_grad, uniform


def bench_accuracy() -> list[Row]:
    from opreg_kernels import philox_normal, philox_uniform
    from opreg_kernels.ops.philox import philox_normal_exact

    seeds = torch.arange(256, device="cuda") * 7919 - 10**6
    rows: list[Row] = []
    for counter in (0, 2**32 - 100):
        uni = philox_uniform(seeds, 65536, counter).cpu()
        uni_ref = philox_uniform.fallback(seeds.cpu(), 65536, counter)
        norm = philox_normal(seeds, 65536, counter).cpu()
        norm_ref = philox_normal.fallback(seeds.cpu(), 65536, counter)
        norm_cuda_fallback = philox_normal.fallback(seeds, 65536, counter).cpu()
        exact = philox_normal_exact(seeds, 65536, counter).cpu().view(torch.int32)
        exact_ref = philox_normal_exact.fallback(seeds.cpu(), 65536, counter).view(torch.int32)
        err = (norm - norm_ref).abs()
        rel = err / norm_ref.abs().clamp_min(1e-3)
        rows.append({
            "counter": counter,
            "uniform bit-identical": bool(torch.equal(uni, uni_ref)),
            "normal max |err|": err.max().item(),
            "normal max rel err (|z|>1e-3)": rel.max().item(),
            "torch-CUDA fallback max |err|": (norm_cuda_fallback - norm_ref).abs().max().item(),
            "exact: values that differ": int((exact != exact_ref).sum()),
            "values": uni.numel(),
        })  # fmt: skip
    print_table("accuracy: Triton on CUDA vs the PyTorch fallback on CPU", rows, list(rows[0]))
    return rows


def bench_cpu(rows: int = 16, cols: int = 2**20, repeats: int = 5) -> list[Row]:
    """The Philox fallbacks on CPU tensors vs torch.randn on CPU (medians, interleaved)."""
    from opreg_kernels import philox_normal, philox_uniform
    from opreg_kernels.ops.philox import philox_normal_exact

    seeds = torch.arange(rows)
    calls: dict[str, Callable[[], Any]] = {
        "torch.randn": lambda: torch.randn(rows, cols),
        "philox_uniform fallback": lambda: philox_uniform.fallback(seeds, cols),
        "philox_normal fallback": lambda: philox_normal.fallback(seeds, cols),
        "philox_normal_exact fallback": lambda: philox_normal_exact.fallback(seeds, cols),
    }
    for call in calls.values():
        call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["torch.randn"])
    found = [
        {
            "op": name, "values": rows * cols, "ms": 1e3 * statistics.median(t),
            "ns/value": 1e9 * statistics.median(t) / (rows * cols),
            "x torch.randn time": statistics.median(t) / base, "threads": torch.get_num_threads(),
        }
        for name, t in times.items()
    ]  # fmt: skip
    print_table(f"CPU: {rows} x {cols} float32 on CPU tensors", found, list(found[0]))
    return found


def bench_sweep() -> list[Row]:
    """Bandwidth of kernel configurations, to choose the defaults.

    Same sizes and byte counts as the bandwidth table: philox writes 1 GiB; fused_add
    reads two distinct 1 GiB tensors and writes a third (3 GiB moved, far beyond L2;
    adding a tensor to itself would read it once and overstate the bandwidth by 3/2).
    """
    rows: list[Row] = []
    philox_configs: list[tuple[str, int, int, bool, list[tuple[int, int, bool]]]] = [
        ("philox_uniform long rows", 1024, 2**18, False,
         [(b, w, True) for b in (512, 1024, 2048) for w in (4, 8)]),
        ("philox_normal long rows", 1024, 2**18, True,
         [(b, w, "ptx") for b in (512, 1024, 2048) for w in (4, 8)]
         + [(1024, 4, "portable"), (1024, 4, "libdevice")]),
        ("philox_uniform short rows", 2**26, 4, False,
         [(b, w, "") for b in (512, 1024) for w in (4, 8)]),
        ("philox_normal short rows", 2**26, 4, True, [(b, 4, "ptx") for b in (512, 1024)]),
    ]  # fmt: skip
    for kernel, rows_, cols, normal, configs in philox_configs:
        for block, warps, math in configs:
            gbs = _philox_config_bandwidth(rows_, cols, normal, block, warps, math)
            free_memory()
            rows.append({
                "kernel": kernel, "block": block, "warps": warps,
                "variant": _PHILOX_MATH[math][0], "GB/s": gbs,
            })  # fmt: skip
    x = torch.randn(GIB // 4, device="cuda")
    y = torch.randn(GIB // 4, device="cuda")
    for block in (2048, 4096, 8192):
        for warps in (4, 8):
            for evict in (False, True):
                gbs = _add_config_bandwidth(x, y, block, warps, evict)
                rows.append({
                    "kernel": "fused_add", "block": block, "warps": warps,
                    "variant": "evict_first" if evict else "", "GB/s": gbs,
                })  # fmt: skip
    t_torch = gpu_ms(lambda: torch.add(x, y), iters=10)
    rows.append({"kernel": "fused_add", "variant": "torch.add", "GB/s": 3 * GIB / t_torch / 1e6})
    print_table(
        "configuration sweep (defaults: DEFAULT_* in opreg_kernels/ops/*/triton_kernels.py; "
        "GB/s as in bandwidth)",
        rows,
        ["kernel", "block", "warps", "variant", "GB/s"],
    )
    return rows


#: Box-Muller variants of the sweep: how the table names them, and (fast_sincos, ptx_math).
#: Uniforms ("") have no Box-Muller: the defaults, which they ignore.
_PHILOX_MATH = {
    "": ("", True, True),
    "ptx": ("hardware log2, fused reduction (default)", True, True),
    "portable": ("libdevice log, 3-part reduction", True, False),
    "libdevice": ("libdevice log, sin, cos", False, False),
}


def _philox_config_bandwidth(
    rows: int, cols: int, normal: bool, block: int, warps: int, math: str
) -> float:
    from opreg_kernels.ops.philox import triton_kernels as philox_kernels

    seeds = torch.arange(rows, device="cuda")
    _, fast_sincos, ptx_math = _PHILOX_MATH[math]
    t = gpu_ms(
        lambda: philox_kernels.launch_rows(
            seeds, cols, 0, normal=normal, block=block, num_warps=warps,
            fast_sincos=fast_sincos, ptx_math=ptx_math,
        ),
        iters=10,
    )  # fmt: skip
    return rows * cols * 4 / t / 1e6


def _add_config_bandwidth(x: torch.Tensor, y: torch.Tensor, block: int, warps: int, evict: bool
                          ) -> float:  # fmt: skip
    from opreg_kernels.ops.fused_add import triton_kernels as add_kernels

    t = gpu_ms(
        lambda: add_kernels.launch_add(x, y, block=block, num_warps=warps, evict=evict), iters=10
    )
    return 3 * GIB / t / 1e6


# -- main --------------------------------------------------------------------------------------
def environment() -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["gpus"] = torch.cuda.device_count()
        env["cuda"] = torch.version.cuda
    return env


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sections", default="import,bandwidth,overhead,accuracy,cpu")
    parser.add_argument("--threads", type=int, help="torch CPU threads (section cpu)")
    parser.add_argument("--sweep", action="store_true", help="also run the configuration sweep")
    parser.add_argument("--json", help="write all results to this file")
    args = parser.parse_args()
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    if args.sweep:
        sections.append("sweep")
    if args.threads:
        torch.set_num_threads(args.threads)
    results: dict[str, Any] = {"environment": environment()}
    print("# opreg-kernels benchmark\n")
    for key, value in results["environment"].items():
        print(f"- {key}: {value}")
    runners = {
        "import": bench_import,
        "bandwidth": bench_bandwidth,
        "overhead": bench_overhead,
        "accuracy": bench_accuracy,
        "cpu": bench_cpu,
        "sweep": bench_sweep,
    }
    for section in sections:
        if section not in runners:
            parser.error(f"unknown section {section!r} (choose from {', '.join(runners)})")
        if section not in ("import", "cpu") and not torch.cuda.is_available():
            print(f"\n## {section}: skipped (needs CUDA)")
            continue
        results[section] = runners[section]()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
