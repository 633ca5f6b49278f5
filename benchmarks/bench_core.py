"""Per-call overhead of opreg ops against the alternatives, measured side by side in one run.

Prints a table of medians and ratios (CPU, tiny tensors). Each case is timed in many short
blocks, interleaved with its baseline, and the median block is kept, so a noisy machine moves
both sides alike. Run: ``hatch run bench`` (or ``python benchmarks/bench_core.py``);
``--json PATH`` also writes the machine, the parameters and every median to PATH (read by
``benchmarks/plot.py``).

Also holds what the other benchmark scripts share: the contenders (``build_ops``,
``vmap_contenders``), interleaved timing (``median_us``), best-of-runs timing (``best_us``)
and the JSON writer (``write_json``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time
import timeit
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import torch
from torch.func import vmap

import opreg_core
from opreg_core import register_vmap_op

#: How the JSON files and the plots name the contenders.
PYTHON_FN = "python fn"
BARE = "bare Library op"
CUSTOM = "custom_op + register_autograd"
EVOX = "custom_op + register_vmap (EvoX-style)"
OPREG_NONDIFF = "opreg differentiable=False"
OPREG_DEFAULT = "opreg default (no backward)"
OPREG_BACKWARD = "opreg with backward"
OPREG_AUTOCAST = "opreg with backward and an autocast rule"
#: Contenders under vmap (see ``vmap_contenders``).
PLAIN_VMAP = "plain fn (torch.vmap)"
OPREG_VMAP = "opreg"
CUSTOM_VMAP = "custom_op + register_vmap"
FALLBACK = "PyTorch per-sample fallback"
#: The first eager call of a fresh op (see ``first_call_us``).
FIRST_FAKE = "first call, fake compared"
FIRST_PAUSED = "first call, aliasing check only"


def _add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def _fake(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _fake_broadcast(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.new_empty(torch.broadcast_shapes(x.shape, y.shape))  # type: ignore[no-untyped-call]


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    pass


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return grad, grad


def _evox_wrap_inputs(
    info: Any, in_dims: Sequence[int | None], *args: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """EvoX's default input wrapping for tensors: batch dim to the front, or a new dim 0."""
    return tuple(
        x.unsqueeze(0) if d is None else x.movedim(d, 0) for d, x in zip(in_dims, args, strict=True)
    )


def evox_style_op(
    fn: Callable[..., Any],
    *,
    name: str,
    fake_fn: Callable[..., Any],
    vmap_fn: Callable[..., Any],
    fake_vmap_fn: Callable[..., Any],
    max_vmap_level: int = 1,
) -> Any:
    """A minimal imitation of how EvoX's ``register_vmap_op`` registers an op.

    One ``custom_op`` for ``fn`` with ``register_fake``; then, per supported vmap level, one
    more ``custom_op`` for ``vmap_fn`` (named ``<name>_vmap``, ``<name>_vmap_vmap``, ...) with
    ``register_fake(fake_vmap_fn)``, and a ``register_vmap`` rule on the previous op that
    wraps the inputs (batch dim to the front) and calls the next one, output dim 0. No
    autograd registration, as in EvoX.
    """
    op = torch.library.custom_op(name, fn, mutates_args=())
    op.register_fake(fake_fn)
    previous, level_name = op, name
    for _ in range(max_vmap_level):
        level_name += "_vmap"
        level_op = torch.library.custom_op(level_name, vmap_fn, mutates_args=())
        level_op.register_fake(fake_vmap_fn)

        def rule(info: Any, in_dims: Any, *args: Any, _next: Any = level_op) -> tuple[Any, int]:
            return _next(*_evox_wrap_inputs(info, in_dims, *args)), 0

        previous.register_vmap(rule)
        previous = level_op
    return op


def build_ops(
    namespace: str = "opreg_bench", evox_levels: int = 1
) -> dict[str, Callable[..., Any]]:
    """The contenders: opreg ops, a bare Library op, custom_op, EvoX-style, the plain function.

    ``custom_op`` has ``register_fake`` and ``register_autograd`` (the features of opreg's
    default op) and a ``register_vmap`` rule that calls the op again with the batch dim
    moved to the front; the bare ``Library`` op has no batching rule, so vmap runs PyTorch's
    per-sample fallback for it.
    """
    lib = torch.library.Library(f"{namespace}_bare", "FRAGMENT")  # type: ignore[no-untyped-call]
    lib.define("add(Tensor x, Tensor y) -> Tensor")  # type: ignore[no-untyped-call]
    lib.impl("add", _add, "CompositeExplicitAutograd")  # type: ignore[no-untyped-call]
    torch.library.register_fake(f"{namespace}_bare::add", _fake, lib=lib)
    bare = getattr(torch.ops, f"{namespace}_bare").add.default

    custom: Any = torch.library.custom_op(f"{namespace}_custom::add", mutates_args=())(_add)
    custom.register_fake(_fake)
    custom.register_autograd(_backward, setup_context=_setup)

    def custom_rule(info: Any, dims: Any, a: torch.Tensor, b: torch.Tensor) -> tuple[Any, int]:
        a = a.unsqueeze(0) if dims[0] is None else a.movedim(dims[0], 0)
        return custom(a, b if dims[1] is None else b.movedim(dims[1], 0)), 0

    custom.register_vmap(custom_rule)

    evox = evox_style_op(
        _add,
        name=f"{namespace}_evox::_custom_op_add",
        fake_fn=_fake,
        vmap_fn=_add,
        fake_vmap_fn=_fake_broadcast,
        max_vmap_level=evox_levels,
    )

    kwargs: dict[str, Any] = {"fake_fn": _fake, "vmap_fn": _add, "fake_vmap_fn": _fake}
    nondiff = register_vmap_op(_add, name=f"{namespace}::nondiff", differentiable=False, **kwargs)
    default = register_vmap_op(_add, name=f"{namespace}::nobackward", **kwargs)
    with_bw = register_vmap_op(
        _add, name=f"{namespace}::backward", backward=_backward, setup_context=_setup, **kwargs
    )
    with_autocast = register_vmap_op(
        _add,
        name=f"{namespace}::autocast",
        backward=_backward,
        setup_context=_setup,
        autocast="lower_precision",
        **kwargs,
    )
    globals().setdefault("_keep_alive", []).append(lib)
    return {
        PYTHON_FN: _add,
        BARE: bare,
        CUSTOM: custom,
        EVOX: evox,
        OPREG_NONDIFF: nondiff,
        OPREG_DEFAULT: default,
        OPREG_BACKWARD: with_bw,
        OPREG_AUTOCAST: with_autocast,
    }


def vmap_contenders(ops: Mapping[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """The function each vmap contender maps: the plain function, opreg's default op, custom_op
    with its ``register_vmap`` rule, the EvoX-style op, and the bare op (per-sample fallback)."""
    torch._C._functorch._set_vmap_fallback_warning_enabled(False)  # type: ignore[attr-defined]
    return {
        PLAIN_VMAP: _add,
        OPREG_VMAP: ops[OPREG_DEFAULT],
        CUSTOM_VMAP: ops[CUSTOM],
        EVOX: ops[EVOX],
        FALLBACK: ops[BARE],
    }


def nested_vmap(
    fn: Callable[..., Any], depth: int, in_dims: tuple[int | None, ...] = (0, None)
) -> Callable[..., Any]:
    """``fn`` under ``depth`` nested ``vmap``s with ``in_dims`` (by default over its first
    argument, the second shared)."""
    for _ in range(depth):
        fn = vmap(fn, in_dims=in_dims)
    return fn


def first_call_us(count: int, namespace: str = "opreg_bench_first") -> dict[str, float]:
    """Median microseconds of the first eager call of ``count`` freshly registered ops each:
    with the fake compared against the kernel's outputs (the default), and with that paused
    (``first_call_fake_check_paused``: the aliasing check alone, as before the fake was
    compared); interleaved, one op of each kind after the other."""
    kwargs: dict[str, Any] = {"fake_fn": _fake, "vmap_fn": _add, "fake_vmap_fn": _fake}
    ops = [register_vmap_op(_add, name=f"{namespace}::add{i}", **kwargs) for i in range(2 * count)]
    x, y = torch.randn(8), torch.randn(8)
    times: dict[str, list[float]] = {FIRST_FAKE: [], FIRST_PAUSED: []}
    for i in range(count):
        for key, op in ((FIRST_FAKE, ops[2 * i]), (FIRST_PAUSED, ops[2 * i + 1])):
            paused = opreg_core.first_call_fake_check_paused()
            with paused if key == FIRST_PAUSED else contextlib.nullcontext():
                start = time.perf_counter()
                op(x, y)
                times[key].append((time.perf_counter() - start) * 1e6)
    for op in ops:
        opreg_core.unregister(op.qualname)
    return {key: statistics.median(values) for key, values in times.items()}


def median_us(
    fns: Mapping[str, Callable[[], Any]], number: int | Mapping[str, int], rounds: int
) -> dict[str, float]:
    """Median microseconds per call of each thunk, timing them interleaved round by round.

    ``number`` is the calls per timed block, one for all thunks or one per thunk.
    """
    return {k: statistics.median(v) for k, v in sample_us(fns, number, rounds).items()}


def sample_us(
    fns: Mapping[str, Callable[[], Any]], number: int | Mapping[str, int], rounds: int
) -> dict[str, list[float]]:
    """Microseconds per call of each thunk in each of ``rounds`` interleaved blocks."""
    calls = {k: number if isinstance(number, int) else number[k] for k in fns}
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for key, fn in fns.items():
            samples[key].append(timeit.timeit(fn, number=calls[key]) / calls[key] * 1e6)
    return samples


def best_us(fn: Callable[[], Any], calls: int = 5000, repeats: int = 7) -> float:
    """Microseconds per call of ``fn``: the best of ``repeats`` runs of ``calls`` calls, after a
    short warm-up (for comparisons printed side by side, not interleaved)."""
    for _ in range(100):
        fn()
    return min(timeit.repeat(fn, number=calls, repeat=repeats)) / calls * 1e6


def calls_per_block(fns: Mapping[str, Callable[[], Any]], block_s: float) -> dict[str, int]:
    """Calls per timed block so that each block of each thunk lasts about ``block_s``."""
    calls = {}
    for key, fn in fns.items():
        fn()
        once = min(timeit.repeat(fn, number=1, repeat=3))
        calls[key] = max(1, math.ceil(block_s / max(once, 1e-7)))
    return calls


def machine_info() -> dict[str, Any]:
    """Where and with what a benchmark ran (stored in every JSON result)."""
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "opreg_core": opreg_core.__version__,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def write_json(path: str, benchmark: str, parameters: dict[str, Any], results: Any) -> None:
    """Write one benchmark's machine info, parameters and results to ``path``."""
    document = {
        "benchmark": benchmark,
        "machine": machine_info(),
        "parameters": parameters,
        "results": results,
    }
    with open(path, "w") as f:
        json.dump(document, f, indent=2)
        f.write("\n")
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=41, help="timed blocks per case")
    parser.add_argument("--number", type=int, default=2000, help="calls per block (eager)")
    parser.add_argument("--json", metavar="PATH", help="also write the results to PATH")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ops = build_ops()
    x, y = torch.randn(8), torch.randn(8)
    xb, yb = torch.randn(64, 8), torch.randn(8)
    x3 = torch.randn(4, 4, 4, 8)

    eager = median_us({k: partial(f, x, y) for k, f in ops.items()}, args.number, args.rounds)
    # An op with an autocast rule: the direct call asks whether any region is active (one C
    # call, ~0.1 us) where an op without one asks nothing; the dispatcher path costs nothing.
    # In a bf16 region: the rule's two casts and its dispatcher round trip, against the op
    # without a rule given inputs already in bf16.
    xh, yh = x.to(torch.bfloat16), y.to(torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        in_region = median_us(
            {
                OPREG_AUTOCAST: partial(ops[OPREG_AUTOCAST], x, y),
                OPREG_BACKWARD: partial(ops[OPREG_BACKWARD], xh, yh),
            },
            args.number,
            args.rounds,
        )
    vm = {k: nested_vmap(f, 1) for k, f in vmap_contenders(ops).items()}
    vmapped = median_us(
        {k: partial(f, xb, yb) for k, f in vm.items()},
        max(args.number // 20, 20),
        args.rounds,
    )
    nested = median_us(
        {
            PLAIN_VMAP: lambda: nested_vmap(_add, 3)(x3, yb),
            OPREG_VMAP: lambda: nested_vmap(ops[OPREG_DEFAULT], 3)(x3, yb),
        },
        max(args.number // 40, 10),
        args.rounds,
    )

    first = first_call_us(max(args.rounds, 21))

    print(
        f"opreg-core {opreg_core.__version__} | torch {torch.__version__} | Python "
        f"{platform.python_version()} | {platform.machine()} | {platform.processor() or 'cpu'}"
        f" | 1 thread | median of {args.rounds} blocks"
    )
    rows = [
        (
            "eager, differentiable=False vs bare Library op",
            eager[OPREG_NONDIFF],
            eager[BARE],
            "<= 1.00",
        ),
        (
            "eager, default (no backward) vs custom_op",
            eager[OPREG_DEFAULT],
            eager[CUSTOM],
            "<= 0.60",
        ),
        ("eager, with backward vs custom_op", eager[OPREG_BACKWARD], eager[CUSTOM], "<= 0.60"),
        (
            "eager, autocast rule vs none (no region active)",
            eager[OPREG_AUTOCAST],
            eager[OPREG_BACKWARD],
            "<= 1.05",
        ),
        (
            "  in a bf16 region: rule on fp32 vs none on bf16",
            in_region[OPREG_AUTOCAST],
            in_region[OPREG_BACKWARD],
            "-",
        ),
        ("eager, with backward vs bare Library op", eager[OPREG_BACKWARD], eager[BARE], "-"),
        ("eager, with backward vs python fn", eager[OPREG_BACKWARD], eager[PYTHON_FN], "-"),
        ("eager, default vs EvoX-style op", eager[OPREG_DEFAULT], eager[EVOX], "-"),
        ("vmap batch 64 vs vmap(plain fn)", vmapped[OPREG_VMAP], vmapped[PLAIN_VMAP], "<= 1.20"),
        (
            "  custom_op + register_vmap vs vmap(plain fn)",
            vmapped[CUSTOM_VMAP],
            vmapped[PLAIN_VMAP],
            "-",
        ),
        ("  EvoX-style vs vmap(plain fn)", vmapped[EVOX], vmapped[PLAIN_VMAP], "-"),
        ("  per-sample fallback vs vmap(plain fn)", vmapped[FALLBACK], vmapped[PLAIN_VMAP], "-"),
        (
            "triple vmap vs plain fn triple-vmapped",
            nested[OPREG_VMAP],
            nested[PLAIN_VMAP],
            "<= 1.40",
        ),
        (
            "first call of an op: fake compared vs aliasing only",
            first[FIRST_FAKE],
            first[FIRST_PAUSED],
            "-",
        ),
        (
            "  later calls (default op) vs its first call",
            eager[OPREG_DEFAULT],
            first[FIRST_FAKE],
            "-",
        ),
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
    if args.json:
        parameters = {
            "rounds": args.rounds,
            "number_eager": args.number,
            "elements": 8,
            "vmap_batch": 64,
            "nested_shape": list(x3.shape),
            "threads": 1,
            "statistic": "median of interleaved blocks, microseconds per call",
        }
        results = {
            "eager_us": eager,
            "bf16_region_us": in_region,
            "vmap_batch64_us": vmapped,
            "triple_vmap_us": nested,
            "first_call_us": first,
            "ratios": [
                {"case": n.strip(), "us": v, "baseline_us": b, "ratio": v / b, "target": t}
                for n, v, b, t in rows
            ],
        }
        write_json(args.json, "core", parameters, results)


if __name__ == "__main__":
    main()
