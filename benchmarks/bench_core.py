"""Per-call overhead of opreg ops against the alternatives, measured side by side in one run.

Prints a table of medians and ratios (CPU, tiny tensors). Each case is timed in many short
blocks, interleaved with its baseline, and the median block is kept, so a noisy machine moves
both sides alike. Run: ``hatch run bench:core`` (or ``python benchmarks/bench_core.py``).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import timeit
from collections.abc import Callable
from typing import Any

import torch
from torch.func import vmap

import opreg_core
from opreg_core import register_vmap_op


def _add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def _fake(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    pass


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return grad, grad


def build_ops() -> dict[str, Callable[..., Any]]:
    """The contenders: opreg ops, a bare Library op, custom_op, and the plain function."""
    lib = torch.library.Library("opreg_bench_bare", "FRAGMENT")
    lib.define("add(Tensor x, Tensor y) -> Tensor")
    lib.impl("add", _add, "CompositeExplicitAutograd")
    torch.library.register_fake("opreg_bench_bare::add", _fake, lib=lib)
    bare = torch.ops.opreg_bench_bare.add.default

    custom = torch.library.custom_op("opreg_bench_custom::add", mutates_args=())(_add)
    custom.register_fake(_fake)
    custom.register_autograd(_backward, setup_context=_setup)

    kwargs: dict[str, Any] = {"fake_fn": _fake, "vmap_fn": _add, "fake_vmap_fn": _fake}
    nondiff = register_vmap_op(_add, name="opreg_bench::nondiff", differentiable=False, **kwargs)
    default = register_vmap_op(_add, name="opreg_bench::nobackward", **kwargs)
    with_bw = register_vmap_op(
        _add, name="opreg_bench::backward", backward=_backward, setup_context=_setup, **kwargs
    )
    globals()["_keep_alive"] = lib
    return {
        "python fn": _add,
        "bare Library op": bare,
        "custom_op": custom,
        "opreg differentiable=False": nondiff,
        "opreg default (no backward)": default,
        "opreg with backward": with_bw,
    }


def median_us(fns: dict[str, Callable[[], Any]], number: int, rounds: int) -> dict[str, float]:
    """Median microseconds per call of each thunk, timing them interleaved round by round."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for key, fn in fns.items():
            samples[key].append(timeit.timeit(fn, number=number) / number * 1e6)
    return {k: statistics.median(v) for k, v in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=41, help="timed blocks per case")
    parser.add_argument("--number", type=int, default=2000, help="calls per block (eager)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ops = build_ops()
    x, y = torch.randn(8), torch.randn(8)
    xb, yb = torch.randn(64, 8), torch.randn(8)
    x3 = torch.randn(4, 4, 4, 8)

    eager = median_us({k: (lambda f=f: f(x, y)) for k, f in ops.items()}, args.number, args.rounds)
    vm = {
        "plain fn": vmap(_add, in_dims=(0, None)),
        "opreg": vmap(ops["opreg default (no backward)"], in_dims=(0, None)),
        "custom_op + register_vmap": None,
        "PyTorch per-sample fallback": vmap(ops["bare Library op"], in_dims=(0, None)),
    }
    custom: Any = ops["custom_op"]
    custom.register_vmap(lambda info, dims, a, b: (custom(a.movedim(dims[0], 0), b), 0))
    vm["custom_op + register_vmap"] = vmap(custom, in_dims=(0, None))
    torch._C._functorch._set_vmap_fallback_warning_enabled(False)
    vmapped = median_us(
        {k: (lambda f=f: f(xb, yb)) for k, f in vm.items() if f is not None},
        max(args.number // 20, 20),
        args.rounds,
    )
    nested = median_us(
        {
            "plain fn": lambda: vmap(
                vmap(vmap(_add, in_dims=(0, None)), in_dims=(0, None)), in_dims=(0, None)
            )(x3, yb),
            "opreg": lambda: vmap(
                vmap(
                    vmap(ops["opreg default (no backward)"], in_dims=(0, None)), in_dims=(0, None)
                ),
                in_dims=(0, None),
            )(x3, yb),
        },
        max(args.number // 40, 10),
        args.rounds,
    )

    print(
        f"opreg-core {opreg_core.__version__} | torch {torch.__version__} | Python "
        f"{platform.python_version()} | {platform.machine()} | {platform.processor() or 'cpu'}"
        f" | 1 thread | median of {args.rounds} blocks"
    )
    rows = [
        (
            "eager, differentiable=False vs bare Library op",
            eager["opreg differentiable=False"],
            eager["bare Library op"],
            "<= 1.00",
        ),
        (
            "eager, default (no backward) vs custom_op",
            eager["opreg default (no backward)"],
            eager["custom_op"],
            "<= 0.60",
        ),
        (
            "eager, with backward vs custom_op",
            eager["opreg with backward"],
            eager["custom_op"],
            "<= 0.60",
        ),
        (
            "eager, with backward vs bare Library op",
            eager["opreg with backward"],
            eager["bare Library op"],
            "-",
        ),
        (
            "eager, with backward vs python fn",
            eager["opreg with backward"],
            eager["python fn"],
            "-",
        ),
        ("vmap batch 64 vs vmap(plain fn)", vmapped["opreg"], vmapped["plain fn"], "<= 1.20"),
        (
            "  custom_op + register_vmap vs vmap(plain fn)",
            vmapped["custom_op + register_vmap"],
            vmapped["plain fn"],
            "-",
        ),
        (
            "  per-sample fallback vs vmap(plain fn)",
            vmapped["PyTorch per-sample fallback"],
            vmapped["plain fn"],
            "-",
        ),
        ("triple vmap vs plain fn triple-vmapped", nested["opreg"], nested["plain fn"], "<= 1.40"),
    ]
    print(
        f"| {'case':<50} | {'opreg/contender us':>18} | {'baseline us':>11} "
        f"| {'ratio':>6} | target |"
    )
    print(f"|{'-' * 52}|{'-' * 20}|{'-' * 13}|{'-' * 8}|--------|")
    for name, value, base, target in rows:
        print(
            f"| {name:<50} | {value:>18.2f} | {base:>11.2f} | {value / base:>6.2f} | {target:>6} |"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
