"""Sweep the candidate variants of ``opreg::philox_normal``'s Triton kernel on a CUDA GPU.

    python benchmarks/gpu/sweep_normal.py [--json out.json] [--quick]

(with the packages not installed: PYTHONPATH=packages/opreg-core/src:packages/opreg-kernels/src:
packages/opreg-testing/src). For rows x cols = 1024 x 2^18 (long rows) and 2^26 x 4 (short
rows), 1 GiB of output each as in ``bench_kernels.py``'s bandwidth table, it times
``torch.randn`` and each variant (the ``launch_rows`` keywords of
``opreg_kernels.ops.philox.triton_kernels``: see the ``DEFAULT_*`` there), printing GB/s and the
speedup over ``torch.randn``. Every variant's normals are compared with the CPU fallback as in
``bench_kernels.py``'s accuracy section (256 seeds x 65536 values at counters 0 and 2**32 - 100:
max |err|, max relative error where |z| > 1e-3) and against the tests' ``NORMAL_TOLERANCE``;
variants that change the log series also get the radius test (all 2**24 uniforms against
float64, <= 1e-6). Uniforms must stay bit-identical: checked for the default configuration
and for each variant that changes the uniform kernel. A variant is "ok" when all of its checks
pass. The last line names the fastest ok variant on long rows.

Stage 1 times each variant alone on top of the defaults; stage 2 combines those that helped
(and the set expected to help from the SASS counts) over loop / block / warps.
Exit status: 1 without CUDA, 2 if the default configuration fails a check.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

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

#: Single variants of stage 1, each on top of the defaults (launch_rows keywords).
SINGLES: list[Config] = [
    {},
    {"mulhi": True},
    {"fold_neg": True},
    {"short_series": True},
    {"cos_poly": True},
    {"unmasked": True},
    {"add_sign": True},
    {"fp_sign": True},
    {"loop": 2},
    {"loop": 4},
    {"loop": 8},
    {"block": 512},
    {"block": 2048, "num_warps": 8},
    {"num_warps": 8},
]
#: The flags expected to help from offline SASS counts (sm_90, 1024 calls per program):
#: dynamic instructions per Philox call 131 (defaults) -> 119 with these and loop=4.
EXPECTED: Config = {"fold_neg": True, "short_series": True, "unmasked": True, "add_sign": True}
#: Flags that change the uniform kernel too (checked bit for bit against the fallback).
UNIFORM_FLAGS = ("mulhi", "unmasked", "loop", "block", "num_warps")
#: Flags that change the log series (checked by the radius test).
RADIUS_FLAGS = ("short_series",)


def name_of(config: Config) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(config.items())) or "defaults"


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
    """Normals (and uniforms where the variant changes them) of ``config`` against the CPU."""
    launch = launcher(config)
    worst_abs = worst_rel = 0.0
    uniform_ok: bool | None = None
    for counter in ACCURACY_COUNTERS:
        got = launch(ref.seeds, ACCURACY_COLS, counter)
        expected = ref.normal[counter]
        err = (got - expected).abs()
        worst_abs = max(worst_abs, err.max().item())
        worst_rel = max(worst_rel, (err / expected.abs().clamp_min(1e-3)).max().item())
        if not torch.isfinite(got).all():
            worst_abs = float("inf")
        if not config or any(k in config for k in UNIFORM_FLAGS):
            uniform = launch(ref.seeds, ACCURACY_COLS, counter, False)
            same = torch.equal(uniform, ref.uniform[counter])
            uniform_ok = same if uniform_ok is None else uniform_ok and same
    row: Row = {"max |err|": worst_abs, "max rel err": worst_rel}
    row["within tol"] = worst_abs <= tolerance
    row["uniform bit-identical"] = uniform_ok
    if any(config.get(k) for k in RADIUS_FLAGS):
        row["radius err"] = radius_error(config)
    free_memory()
    return row


@triton.jit  # type: ignore[untyped-decorator]
def _radius_kernel(words_ptr, out_ptr, SHORT_SERIES: tl.constexpr):  # type: ignore[no-untyped-def]
    offsets = tl.program_id(0) * 4096 + tl.arange(0, 4096)
    words = tl.load(words_ptr + offsets).to(tl.uint32, bitcast=True)
    tl.store(out_ptr + offsets, philox._radius(words, True, SHORT_SERIES))


def radius_error(config: Config) -> float:
    """Max |r - exact| over all 2**24 uniforms, as the tests' radius test (PTX math)."""
    j = torch.arange(2**24, dtype=torch.int64, device="cuda")
    words = (j << 8).to(torch.int32)
    out = torch.empty(words.shape, dtype=torch.float32, device="cuda")
    _radius_kernel[(2**24 // 4096,)](words, out, SHORT_SERIES=bool(config.get("short_series")))
    exact = torch.sqrt(-2.0 * torch.log((j.double() * 2.0**-24).clamp_min(1e-10)))
    return (out.double() - exact).abs().max().item()


def time_config(config: Config, rows: int, cols: int, ref: Reference) -> Row:
    """GPU time of ``config`` writing ``rows x cols`` normals, and its layout check."""
    launch = launcher(config)
    seeds = torch.arange(rows, device="cuda")
    ms = gpu_ms(lambda: launch(seeds, cols))
    expected, picked = ref.layout[(rows, cols)]
    got = launch(seeds, cols)[torch.tensor(picked, device="cuda")]
    layout_err = (got - expected).abs().max().item()
    return {"ms": ms, "GB/s": rows * cols * 4 / ms / 1e6, "layout err": layout_err}


def randn_gbs(rows: int, cols: int) -> float:
    """GB/s of ``torch.randn(rows, cols)`` on the GPU."""
    return rows * cols * 4 / gpu_ms(lambda: torch.randn(rows, cols, device="cuda")) / 1e6


def uniform_gbs(rows: int, cols: int) -> float:
    """GB/s of the default uniform kernel writing ``rows x cols``."""
    seeds, launch = torch.arange(rows, device="cuda"), launcher({})
    return rows * cols * 4 / gpu_ms(lambda: launch(seeds, cols, 0, False)) / 1e6


class Sweep:
    def __init__(self, ref: Reference, tolerance: float) -> None:
        self.ref, self.tolerance = ref, tolerance
        self.checks: dict[str, Row] = {}
        self.rows: list[Row] = []
        self.randn: dict[str, float] = {}  # GB/s
        self.timed: set[tuple[str, str]] = set()

    def check(self, config: Config) -> Row:
        name = name_of(config)
        if name not in self.checks:
            self.checks[name] = accuracy(config, self.ref, self.tolerance)
        return self.checks[name]

    def ok(self, row: Row) -> bool:
        check = self.checks[row["variant"]]
        return bool(
            check["within tol"]
            and check["uniform bit-identical"] is not False
            and check.get("radius err", 0.0) <= RADIUS_BOUND
            and row["layout err"] <= self.tolerance
        )

    def run(self, stage: str, config: Config) -> None:
        check = self.check(config)
        for label, rows, cols in SIZES:
            # loop only changes long rows: short rows with and without it are one kernel.
            effective = {k: v for k, v in config.items() if cols > 4 or k != "loop"}
            if (label, name_of(effective)) in self.timed:
                continue
            self.timed.add((label, name_of(effective)))
            timed = time_config(config, rows, cols, self.ref)
            free_memory()
            row = {"stage": stage, "size": label, "variant": name_of(config), **timed}
            row["speedup"] = timed["GB/s"] / self.randn[label]
            row.update({k: v for k, v in check.items() if k != "within tol"})
            row["ok"] = self.ok(row)
            self.rows.append(row)
            print(
                f"{stage:7} {label:22} {row['variant']:70} {row['GB/s']:7.0f} GB/s "
                f"{row['speedup']:5.2f}x  err {check['max |err|']:.3g}  ok={row['ok']}",
                flush=True,
            )

    def best(self, label: str, stage: str | None = None) -> Row | None:
        rows = [
            r for r in self.rows
            if r["size"] == label and r["ok"] and (stage is None or r["stage"] == stage)
        ]  # fmt: skip
        return max(rows, key=lambda r: r["GB/s"]) if rows else None


#: Stage 2 launch shapes (block / warps) and the loops tried with each.
SHAPES: list[tuple[Config, list[int]]] = [
    ({}, [1, 2, 4, 8]),
    ({"num_warps": 8}, [1, 4]),
    ({"block": 512}, [1, 4]),
    ({"block": 2048, "num_warps": 8}, [1, 2]),
]


def stage2_configs(helped: Config, quick: bool) -> list[Config]:
    """Combinations of stage 2: the helpful flags and the expected set, over loop/block/warps."""
    bases = [b for b in ([helped, EXPECTED] if helped != EXPECTED else [EXPECTED]) if b]
    configs = []
    for base in bases:
        for shape, loops in SHAPES[:1] if quick else SHAPES:
            for loop in loops:
                config = {**base, **shape}
                if loop > 1:
                    config["loop"] = loop
                configs.append(config)
    for extra in ({"fp_sign": True}, {"cos_poly": True}, {"mulhi": True}):
        if not any(k in helped for k in extra):
            configs.append({**EXPECTED, **extra, "loop": 4})
    return configs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", help="write all results to this file")
    parser.add_argument("--quick", action="store_true", help="fewer stage-2 combinations")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("sweep_normal: needs a CUDA GPU (torch.cuda.is_available() is False)")
    tolerance = normal_tolerance()
    env = environment()
    print("# philox_normal variant sweep\n")
    for key, value in env.items():
        print(f"- {key}: {value}")
    print(f"- NORMAL_TOLERANCE: {tolerance}; radius bound {RADIUS_BOUND}\n")

    sweep = Sweep(Reference(), tolerance)
    for label, rows, cols in SIZES:
        sweep.randn[label] = randn_gbs(rows, cols)
        free_memory()
    default = sweep.check({})
    if not (default["within tol"] and default["uniform bit-identical"]):
        print(f"the default configuration fails its checks: {default}")
        sys.exit(2)

    for config in SINGLES:
        sweep.run("single", config)
    baseline = {r["size"]: r["GB/s"] for r in sweep.rows if r["variant"] == "defaults"}
    long = SIZES[0][0]  # flags are kept for stage 2 by their long-row figures
    helped: Config = {}
    for config in SINGLES[1:]:
        row = next(r for r in sweep.rows if r["variant"] == name_of(config) and r["size"] == long)
        flags = {k: v for k, v in config.items() if k not in ("loop", "block", "num_warps")}
        if flags and row["ok"] and row["GB/s"] > 1.005 * baseline[long]:
            helped.update(flags)
    print(f"\nflags faster than the defaults on their own (> 0.5 %): {name_of(helped)}\n")
    for config in stage2_configs(helped, args.quick):
        sweep.run("combo", config)

    # torch.randn again (the GPU's clocks may drift over the run), and the uniform kernel.
    reference_rows = []
    for label, rows, cols in SIZES:
        randn_end = randn_gbs(rows, cols)
        free_memory()
        reference_rows.append({
            "size": label,
            "torch.randn GB/s (start)": sweep.randn[label],
            "torch.randn GB/s (end)": randn_end,
            "philox_uniform defaults GB/s": uniform_gbs(rows, cols),
        })  # fmt: skip
        free_memory()

    columns = ["stage", "size", "variant", "ms", "GB/s", "speedup", "max |err|", "max rel err",
               "uniform bit-identical", "radius err", "layout err", "ok"]  # fmt: skip
    print_table(
        "philox_normal variants (speedup vs torch.randn of the same size)", sweep.rows, columns
    )
    print_table(
        "references: torch.randn at the start and the end, philox_uniform (write-bound)",
        reference_rows,
        list(reference_rows[0]),
    )
    best = {label: sweep.best(label) for label, _, _ in SIZES}
    if args.json:
        results = {
            "environment": env, "normal_tolerance": tolerance, "rows": sweep.rows,
            "checks": sweep.checks, "references": reference_rows,
            "helped": helped, "best": best,
        }  # fmt: skip
        Path(args.json).write_text(json.dumps(results, indent=2))
    short = best[SIZES[1][0]]
    if short is not None:
        print(f"\nfastest ok on short rows: {short['variant']} ({short['GB/s']:.0f} GB/s, "
              f"{short['speedup']:.2f}x torch.randn)")  # fmt: skip
    winner = best[long]
    if winner is None:
        print("fastest within tolerance on long rows: none passed its checks")
        sys.exit(2)
    print(
        f"fastest within tolerance on long rows: {winner['variant']} ({winner['GB/s']:.0f} "
        f"GB/s, {winner['speedup']:.2f}x torch.randn; defaults {baseline[long]:.0f} GB/s)"
    )


if __name__ == "__main__":
    main()
