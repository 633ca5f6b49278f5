"""Sweep the launch shapes of ``opreg::philox_normal``'s Triton kernels on a CUDA GPU.

    python benchmarks/probes/sweep_normal.py [--json out.json] [--quick]

(with the packages not installed: PYTHONPATH=packages/opreg-core/src:packages/opreg-kernels/src:
packages/opreg-testing/src). For rows x cols = 1024 x 2^18 (long rows) and 2^26 x 4 (short
rows), 1 GiB of output each as in ``bench_kernels.py``'s bandwidth table, it times
``torch.randn`` and the normal kernel (and the uniform one, against ``torch.rand``) for each
launch shape: the ``launch_rows`` keywords ``loop`` (blocks per long-row program), ``block``
and ``num_warps`` of ``opreg_kernels.ops.philox.triton_kernels``, printing GB/s and the
speedup. Every shape's normals are compared with the CPU fallback as in ``bench_kernels.py``'s
accuracy section (256 seeds x 65536 values at counters 0 and 2**32 - 100: max |err|, max
relative error where |z| > 1e-3) and against the tests' ``NORMAL_TOLERANCE``, its uniforms
bit for bit; the timed shapes' layout is checked on a few rows. The radius (the kernel's log
with its series near u1 = 1, the same for every shape) is checked once, over all 2**24
uniforms against float64 (<= 1e-6, as the tests). A shape is "ok" when all of its checks
pass. The last line names the fastest ok shape on long rows.

Exit status: 1 without CUDA, 2 if the default shape fails a check.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from opreg_kernels import philox_normal, philox_uniform
from opreg_kernels.ops.philox import triton_kernels as philox

_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(_ROOT / "benchmarks"))
from bench_kernels import environment, free_memory, gpu_ms, print_table  # noqa: E402

Config = dict[str, Any]
Row = dict[str, Any]

SIZES = (("long rows 1024 x 2^18", 1024, 2**18), ("short rows 2^26 x 4", 2**26, 4))
ACCURACY_SEEDS, ACCURACY_COLS, ACCURACY_COUNTERS = 256, 65536, (0, 2**32 - 100)
RADIUS_BOUND = 1e-6  # as tests/kernels/test_triton_kernels.py's radius test
DEFAULTS: Config = {
    "block": philox.DEFAULT_BLOCK, "num_warps": philox.DEFAULT_NUM_WARPS,
    "loop": philox.DEFAULT_LOOP,
}  # fmt: skip

#: Launch shapes (block / warps) and the loops tried with each (``--quick``: the first only).
SHAPES: list[tuple[Config, list[int]]] = [
    ({"block": 1024, "num_warps": 4}, [1, 2, 4, 8]),
    ({"block": 1024, "num_warps": 8}, [1, 4]),
    ({"block": 512, "num_warps": 4}, [1, 4, 8]),
    ({"block": 2048, "num_warps": 4}, [1, 2, 4]),
    ({"block": 2048, "num_warps": 8}, [1, 2, 4]),
]


def configs(quick: bool) -> list[Config]:
    """The defaults first, then every shape and loop of ``SHAPES``."""
    found = [dict(DEFAULTS)]
    for shape, loops in SHAPES[:1] if quick else SHAPES:
        for loop in loops:
            config = {**shape, "loop": loop}
            if config != DEFAULTS:
                found.append(config)
    return found


def name_of(config: Config) -> str:
    name = " ".join(f"{k}={config[k]}" for k in ("block", "num_warps", "loop") if k in config)
    return f"{name} (defaults)" if config == DEFAULTS else name


def normal_tolerance() -> float:
    """``NORMAL_TOLERANCE`` of the tests, read from the test file (importing it needs pytest)."""
    path = _ROOT / "tests" / "kernels" / "test_triton_kernels.py"
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "NORMAL_TOLERANCE" for t in targets):
            return float(ast.literal_eval(value))
    raise SystemExit(f"sweep_normal: NORMAL_TOLERANCE not found in {path}")


def launcher(config: Config) -> Callable[..., torch.Tensor]:
    def launch(seeds: torch.Tensor, n: int, counter: int = 0, normal: bool = True) -> torch.Tensor:
        return philox.launch_rows(seeds, n, counter, normal=normal, **config)

    return launch


class Reference:
    """CPU fallback outputs for the accuracy checks, computed once and kept on the GPU."""

    def __init__(self) -> None:
        self.seeds = torch.arange(ACCURACY_SEEDS, device="cuda") * 7919 - 10**6
        cpu = self.seeds.cpu()
        self.normal = {
            c: philox_normal.fallback(cpu, ACCURACY_COLS, c).cuda() for c in ACCURACY_COUNTERS
        }
        self.uniform = {
            c: philox_uniform.fallback(cpu, ACCURACY_COLS, c).cuda() for c in ACCURACY_COUNTERS
        }
        # Layout checks of the timed shapes: a few rows of each against the fallback.
        self.layout: dict[tuple[int, int], tuple[torch.Tensor, list[int]]] = {}
        for _, rows, cols in SIZES:
            picked = [0, 1, rows - 1] if cols > 4 else [*range(4096), rows - 1]
            seeds = torch.tensor(picked, dtype=torch.int64)  # the timed seeds are arange(rows)
            self.layout[(rows, cols)] = (philox_normal.fallback(seeds, cols, 0).cuda(), picked)


def accuracy(config: Config, ref: Reference, tolerance: float) -> Row:
    """Normals and uniforms of ``config`` against the CPU fallback."""
    launch = launcher(config)
    worst_abs = worst_rel = 0.0
    uniform_ok = True
    for counter in ACCURACY_COUNTERS:
        got = launch(ref.seeds, ACCURACY_COLS, counter)
        expected = ref.normal[counter]
        err = (got - expected).abs()
        worst_abs = max(worst_abs, err.max().item())
        worst_rel = max(worst_rel, (err / expected.abs().clamp_min(1e-3)).max().item())
        if not torch.isfinite(got).all():
            worst_abs = float("inf")
        uniform = launch(ref.seeds, ACCURACY_COLS, counter, False)
        uniform_ok = uniform_ok and torch.equal(uniform, ref.uniform[counter])
    free_memory()
    return {
        "max |err|": worst_abs, "max rel err": worst_rel, "within tol": worst_abs <= tolerance,
        "uniform bit-identical": uniform_ok,
    }  # fmt: skip


def radius_error() -> float:
    """Max |r - exact| over all 2**24 uniforms with the CUDA kernel's math, as the tests."""
    sys.path.insert(0, str(_ROOT / "tests" / "kernels"))  # the tests' radius kernel
    try:
        radius = importlib.import_module("radius_kernel").radius
    finally:
        sys.path.remove(str(_ROOT / "tests" / "kernels"))
    j = torch.arange(2**24, dtype=torch.int64, device="cuda")
    got = radius((j << 8).to(torch.int32), philox.DEFAULT_PTX_MATH)
    exact = torch.sqrt(-2.0 * torch.log((j.double() * 2.0**-24).clamp_min(1e-10)))
    return float((got.double() - exact).abs().max().item())


def gbs(rows: int, cols: int, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> float:
    """GB/s of ``fn(*args, **kwargs)`` writing ``rows x cols`` float32."""
    return float(rows * cols * 4 / gpu_ms(lambda: fn(*args, **kwargs)) / 1e6)


class Sweep:
    def __init__(self, ref: Reference, tolerance: float, radius_ok: bool) -> None:
        self.ref, self.tolerance, self.radius_ok = ref, tolerance, radius_ok
        self.checks: dict[str, Row] = {}
        self.rows: list[Row] = []
        self.randn: dict[str, float] = {}  # GB/s
        self.rand: dict[str, float] = {}
        self.timed: set[tuple[str, str]] = set()

    def check(self, config: Config) -> Row:
        name = name_of(config)
        if name not in self.checks:
            self.checks[name] = accuracy(config, self.ref, self.tolerance)
        return self.checks[name]

    def run(self, config: Config) -> None:
        check = self.check(config)
        launch = launcher(config)
        for label, rows, cols in SIZES:
            # loop only changes long rows: short rows with any loop are one kernel.
            effective = {k: v for k, v in config.items() if cols > 4 or k != "loop"}
            if (label, name_of(effective)) in self.timed:
                continue
            self.timed.add((label, name_of(effective)))
            seeds = torch.arange(rows, device="cuda")
            normal = gbs(rows, cols, launch, seeds, cols)
            uniform = gbs(rows, cols, launch, seeds, cols, 0, False)
            expected, picked = self.ref.layout[(rows, cols)]
            got = launch(seeds, cols)[torch.tensor(picked, device="cuda")]
            layout_err = (got - expected).abs().max().item()
            free_memory()
            row: Row = {
                "size": label, "variant": name_of(config), "GB/s": normal,
                "speedup": normal / self.randn[label], "uniform GB/s": uniform,
                "uniform speedup": uniform / self.rand[label],
                **{k: v for k, v in check.items() if k != "within tol"},
                "layout err": layout_err,
            }  # fmt: skip
            row["ok"] = bool(
                check["within tol"]
                and check["uniform bit-identical"]
                and self.radius_ok
                and layout_err <= self.tolerance
            )
            self.rows.append(row)
            print(
                f"{label:22} {row['variant']:40} {normal:7.0f} GB/s {row['speedup']:5.2f}x  "
                f"uniform {uniform:7.0f} GB/s {row['uniform speedup']:5.2f}x  "
                f"err {check['max |err|']:.3g}  ok={row['ok']}",
                flush=True,
            )

    def best(self, label: str) -> Row | None:
        rows = [r for r in self.rows if r["size"] == label and r["ok"]]
        return max(rows, key=lambda r: r["GB/s"]) if rows else None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", help="write all results to this file")
    parser.add_argument("--quick", action="store_true", help="block 1024 / 4 warps only")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("sweep_normal: needs a CUDA GPU (torch.cuda.is_available() is False)")
    tolerance = normal_tolerance()
    env = environment()
    print("# philox_normal launch-shape sweep\n")
    for key, value in env.items():
        print(f"- {key}: {value}")
    radius_err = radius_error()
    free_memory()
    print(f"- NORMAL_TOLERANCE: {tolerance}; radius max |err| {radius_err:.3g} "
          f"(bound {RADIUS_BOUND})\n")  # fmt: skip

    sweep = Sweep(Reference(), tolerance, radius_err <= RADIUS_BOUND)
    for label, rows, cols in SIZES:
        sweep.randn[label] = gbs(rows, cols, torch.randn, rows, cols, device="cuda")
        sweep.rand[label] = gbs(rows, cols, torch.rand, rows, cols, device="cuda")
        free_memory()
    default = sweep.check(DEFAULTS)
    if not (default["within tol"] and default["uniform bit-identical"] and sweep.radius_ok):
        print(f"the default shape fails its checks: {default}, radius {radius_err:.3g}")
        sys.exit(2)
    for config in configs(args.quick):
        sweep.run(config)

    # torch.randn / torch.rand again: the GPU's clocks may drift over the run.
    reference_rows = []
    for label, rows, cols in SIZES:
        reference_rows.append({
            "size": label,
            "torch.randn GB/s (start)": sweep.randn[label],
            "torch.randn GB/s (end)": gbs(rows, cols, torch.randn, rows, cols, device="cuda"),
            "torch.rand GB/s (start)": sweep.rand[label],
            "torch.rand GB/s (end)": gbs(rows, cols, torch.rand, rows, cols, device="cuda"),
        })  # fmt: skip
        free_memory()

    columns = ["size", "variant", "GB/s", "speedup", "uniform GB/s", "uniform speedup",
               "max |err|", "max rel err", "uniform bit-identical", "layout err", "ok"]  # fmt: skip
    print_table(
        "philox_normal / philox_uniform launch shapes (speedup vs torch.randn / torch.rand)",
        sweep.rows,
        columns,
    )
    print_table(
        "references: torch.randn and torch.rand at the start and the end",
        reference_rows,
        list(reference_rows[0]),
    )
    best = {label: sweep.best(label) for label, _, _ in SIZES}
    if args.json:
        results = {
            "environment": env, "normal_tolerance": tolerance, "radius_err": radius_err,
            "rows": sweep.rows, "checks": sweep.checks, "references": reference_rows,
            "best": best,
        }  # fmt: skip
        Path(args.json).write_text(json.dumps(results, indent=2))
    long, short = (best[label] for label, _, _ in SIZES)
    baseline = {r["size"]: r["GB/s"] for r in sweep.rows if r["variant"] == name_of(DEFAULTS)}
    if short is not None:
        print(f"\nfastest ok on short rows: {short['variant']} ({short['GB/s']:.0f} GB/s, "
              f"{short['speedup']:.2f}x torch.randn)")  # fmt: skip
    if long is None:
        print("fastest within tolerance on long rows: none passed its checks")
        sys.exit(2)
    print(
        f"fastest within tolerance on long rows: {long['variant']} ({long['GB/s']:.0f} "
        f"GB/s, {long['speedup']:.2f}x torch.randn; defaults {baseline[SIZES[0][0]]:.0f} GB/s)"
    )


if __name__ == "__main__":
    main()
