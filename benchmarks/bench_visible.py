"""Compiler-visible vs opaque opreg Triton ops inside a compiled graph (CUDA).

    python benchmarks/bench_visible.py [--json benchmarks/results/h200_visible.json]
                                       [--code-dir DIR]

Each model puts an opreg op between Inductor-fusable pointwise ops:

  add     sigmoid(fused_add(relu(2x + 1), y / 2)) * 3        (x, y: float32)
  philox  tanh(philox_uniform(seeds, n, 7) * 2 - 1)          (seeds: int64)

and runs it four ways, in one process: ``visible`` (the op registered with
``compiler_visible=True``: Inductor launches the Triton kernel from its own code),
``opaque`` (the same launcher registered with ``compiler_visible=False``: an extern call of
the op), ``torch`` (the same maths in plain PyTorch, all fusable: the lower bound; add only)
and ``eager`` (the opreg op, not compiled). Both ``torch.compile`` modes ``default`` and
``reduce-overhead`` (CUDA graphs) are timed at a tiny size (host-bound: host microseconds per
call) and at a large one (bandwidth-bound: GPU milliseconds per call). Ratios are within this
run. The generated code of each compiled variant is summarised (Triton launches, extern op
calls, whether the op's own kernel is called directly); ``--code-dir`` keeps it whole.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_kernels import environment, free_memory, gpu_ms, host_us, print_table
from opreg_kernels import fused_add, philox_uniform, register_triton_op

Row = dict[str, Any]
_KERNELS = "opreg_kernels.ops"


def _twin(op: Any, name: str, launcher: str, visible: bool, **options: Any) -> Any:
    """``op``'s fallback, fake and Triton launcher registered again under ``name``."""
    return register_triton_op(
        op.fallback,
        name=name,
        fake_fn=op.fake_fn,
        triton_fn=launcher,
        compiler_visible=visible,
        **options,
    )


def _ops() -> dict[str, dict[str, Any]]:
    """The op each variant calls, per model (the shipped fused_add is the visible one)."""
    add_launcher = f"{_KERNELS}.fused_add.triton_kernels:launch"
    philox_launcher = f"{_KERNELS}.philox.triton_kernels:launch_uniform"
    return {
        "add": {
            "visible": fused_add,
            "opaque": _twin(
                fused_add,
                "bench_visible::add_opaque",
                add_launcher,
                False,
                backward=fused_add.backward,
            ),
            "torch": torch.add,
        },
        "philox": {
            "visible": _twin(
                philox_uniform,
                "bench_visible::uniform_visible",
                philox_launcher,
                True,
                differentiable=False,
            ),
            "opaque": philox_uniform,
        },
    }


def _model(kind: str, op: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    if kind == "add":

        def add_model(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.sigmoid(op(torch.relu(x * 2 + 1), y * 0.5)) * 3

        return add_model

    def philox_model(seeds: torch.Tensor, n: int) -> torch.Tensor:
        return torch.tanh(op(seeds, n, 7) * 2 - 1)

    return philox_model


def _inputs(kind: str, large: bool) -> tuple[Any, ...]:
    if kind == "add":
        numel = 2**26 if large else 4096
        return torch.randn(numel, device="cuda"), torch.randn(numel, device="cuda")
    rows, n = (4096, 16384) if large else (64, 64)
    return torch.arange(rows, device="cuda", dtype=torch.int64) * 7919 + 3, n


def _code_summary(code: str, op_names: list[str]) -> Row:
    lines = [line for line in code.splitlines() if not line.lstrip().startswith("#")]
    calls = [f"torch.ops.{name}.default(" for name in op_names]
    return {
        "triton_launches": sum(".run(" in line for line in lines),
        "extern_op_calls": sum(any(call in line for call in calls) for line in lines),
        "op_kernel_called": any(
            ("_add_kernel" in line or "_philox_" in line) and ".run(" in line for line in lines
        ),
    }


def _time(fn: Callable[..., Any], inputs: tuple[Any, ...], large: bool) -> float:
    if large:
        return gpu_ms(lambda: fn(*inputs))
    return host_us(lambda: fn(*inputs), calls=500, repeats=9)


def bench(code_dir: Path | None) -> tuple[list[Row], list[Row]]:
    from torch._inductor.utils import run_and_get_code

    op_names = [
        "opreg.fused_add", "bench_visible.add_opaque",
        "opreg.philox_uniform", "bench_visible.uniform_visible",
    ]  # fmt: skip
    timings: list[Row] = []
    codes: list[Row] = []
    for kind, variants in _ops().items():
        for large in (False, True):
            inputs = _inputs(kind, large)
            measured: dict[tuple[str, str], float] = {}
            for variant, op in variants.items():
                model = _model(kind, op)
                if variant == "visible":  # eager: the opaque twin runs the same launcher
                    measured[variant, "eager"] = _time(model, inputs, large)
                for mode in ("default", "reduce-overhead"):
                    torch._dynamo.reset()
                    compiled = torch.compile(model, mode=mode)
                    if mode == "default" and not large:
                        _, generated = run_and_get_code(compiled, *inputs)
                        text = "\n".join(generated)
                        summary = _code_summary(text, op_names)
                        codes.append({"model": kind, "variant": variant, **summary})
                        if code_dir is not None:
                            (code_dir / f"{kind}_{variant}.py").write_text(text)
                    measured[variant, mode] = _time(compiled, inputs, large)
                torch._dynamo.reset()
                free_memory()
            unit = "GPU ms" if large else "host us"
            for (variant, mode), value in measured.items():
                opaque = measured.get(("opaque", mode))
                timings.append({
                    "model": kind, "size": "large" if large else "tiny", "variant": variant,
                    "mode": mode, unit: value,
                    "vs opaque": value / opaque if opaque and variant != "opaque" else None,
                })  # fmt: skip
    return timings, codes


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--code-dir", help="write each compiled variant's generated code here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_visible.py needs a CUDA device")
    code_dir = Path(args.code_dir) if args.code_dir else None
    if code_dir is not None:
        code_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"environment": environment()}
    print("# compiler-visible vs opaque opreg ops in a compiled graph\n")
    for key, value in results["environment"].items():
        print(f"- {key}: {value}")
    timings, codes = bench(code_dir)
    columns = ["model", "size", "variant", "mode", "host us", "GPU ms", "vs opaque"]
    print_table("time per call (tiny: host us; large: GPU ms)", timings, columns)
    print_table("generated code (default mode, tiny inputs)", codes, list(codes[0]))
    results["timings"] = timings
    results["generated_code"] = codes
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
