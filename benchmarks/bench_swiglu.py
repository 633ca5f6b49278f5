"""A training step of a Liger-style SwiGLU with an in-place Triton backward: the opreg op against
the hand-written ``torch.autograd.Function`` around the same kernels (issue #24).

    python benchmarks/bench_swiglu.py [--device cuda|cpu] [--reps 1000] [--blocks 41]
                                      [--steps 50] [--shapes 8192x4096,...] [--json PATH]

Both contenders come from examples/triton_swiglu.py: ``swiglu`` (``register_triton_op``, its
backward calls the mutating op ``swiglu_backward_``) and ``SwiGLUFunction`` (the same two
launchers in a hand-written Function, as Liger-Kernel writes it). ``launchers`` calls the two
launchers without autograd: the floor. A step is ``out = fn(a, b)`` then
``torch.autograd.grad(out, (a, b), g)``: the backward writes ``da`` and ``db`` into ``a`` and
``b`` and returns them, so no gradient buffer is allocated (``a`` and ``b`` are leaves, and
``autograd.grad`` returns the gradients without accumulating them into ``.grad``).

A diagnostic contender, ``opreg, launching backward`` (:func:`launching_op`; not the pattern:
its backward bumps the version counters and calls the in-place launcher itself), splits
opreg's cost between the call of the mutating op and the rest.

Shapes (``--shapes``; on CUDA by default 8192x4096, 16384x8192 and 4x64 bf16): a step moves
16 bytes per element of ``a`` through the GPU (bf16; the forward reads ``a`` and ``b`` and
writes ``c``, the backward reads ``dc``, ``a`` and ``b`` and writes ``a`` and ``b``): 0.54 GB at
8192x4096 (about 135 us of an H200) and 2.1 GB at 16384x8192 (about 540 us); at 4x64 only the
host counts.
Which of the GPU and the host limits the larger shapes depends on the host: on the lent H200
hosts a hand-written Function's step costs about 200 us of host time (autograd's engine hands
the backward to its CUDA thread and back), so 8192x4096 is still the host's and 16384x8192
the GPU's. Two timings, each contender interleaved with the others, ratio
``opreg / Function`` as the median of the per-round ratios (issue #24's target: <= 1.05):

- ``synced``: one step's wall time with the GPU synchronised before and after it (``a`` and
  ``b`` restored from a copy before each step, untimed), median over ``--reps`` steps;
- ``queued``: ``--steps`` steps back to back, then one synchronisation: a training loop's
  throughput, per step, median over ``--blocks`` blocks (``a`` and ``b`` are not restored
  between the steps of a block: they hold the last step's gradients, which changes no timing).

Then, where the host time goes (4x64 bf16, ``bench_kernels.host_us_rounds``: calls queued,
interleaved rounds): each launcher alone, the forward through the Function and through the op
(inputs requiring grad, and not), and the in-place write through the mutating op.

On CPU (no CUDA, or ``TRITON_INTERPRET=1``) the kernels run in Triton's interpreter and only
the tiny shape is timed: that checks that the script runs, its figures mean nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bench_core import write_json  # this folder's helpers (run as python benchmarks/...)
from bench_kernels import host_us_rounds
from opreg_kernels import register_triton_op, triton_kernel_info

Row = dict[str, Any]
TARGET = 1.05
#: The shapes timed on CUDA by default: the issue's, one where the GPU limits a step on the
#: lent H200 hosts, and one where only the host counts (module docstring).
CUDA_SHAPES = [(8192, 4096), (16384, 8192), (4, 64)]
#: The diagnostic contender's name (:func:`launching_op`).
DIAGNOSTIC = "opreg, launching backward"


def load_example() -> Any:
    """examples/triton_swiglu.py as a module (it is not a package)."""
    path = Path(__file__).resolve().parents[1] / "examples" / "triton_swiglu.py"
    spec = importlib.util.spec_from_file_location("triton_swiglu_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def launching_op(example: Any) -> Any:
    """A diagnostic, not the pattern: the op with a backward that bumps the buffers' version
    counters itself (what the mutating op's declaration does) and calls the in-place
    launcher directly instead of the mutating op. Correct under plain autograd only (under
    ``torch.func`` and ``torch.compile`` a backward must not launch Triton itself); it
    measures what the step would cost if calling the mutating op cost what its launcher does.
    """

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(*inputs)

    def backward(ctx: Any, dc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = ctx.saved_tensors
        torch.autograd.graph.increment_version(a)
        torch.autograd.graph.increment_version(b)
        example.swiglu_backward_inplace(a, b, dc)
        return a, b

    return register_triton_op(
        example.swiglu.fallback, name="bench_swiglu::swiglu_launching_backward",
        fake_fn=lambda a, b: torch.empty_like(a), triton_fn=example.swiglu_forward,
        setup_context=setup_context, backward=backward,
    )  # fmt: skip


def contenders(example: Any, diagnostic: Any = None) -> dict[str, Callable[..., Any]]:
    """One training step per contender: forward, then the gradients of a and b (with
    ``diagnostic``, :func:`launching_op`'s op too)."""

    def launchers(a: torch.Tensor, b: torch.Tensor, g: torch.Tensor) -> Any:
        out = example.swiglu_forward(a, b)
        example.swiglu_backward_inplace(a, b, g)
        return out

    def step(fn: Callable[..., torch.Tensor]) -> Callable[..., Any]:
        def run(a: torch.Tensor, b: torch.Tensor, g: torch.Tensor) -> Any:
            return torch.autograd.grad(fn(a, b), (a, b), g)

        return run

    steps = {
        "launchers": launchers,
        "Function": step(example.SwiGLUFunction.apply),
        "opreg": step(example.swiglu),
    }
    if diagnostic is not None:
        steps[DIAGNOSTIC] = step(diagnostic)
    return steps


def check(example: Any, device: str, *more: Callable[..., torch.Tensor]) -> None:
    """Both contenders (and ``more``) equal PyTorch, forward and backward (before anything is
    timed)."""
    a0 = torch.randn(64, 300, device=device, dtype=torch.bfloat16)
    b0 = torch.randn_like(a0)
    g = torch.randn_like(a0)
    ar, br = a0.float().requires_grad_(), b0.float().requires_grad_()
    expected = torch.nn.functional.silu(ar) * br
    da, db = torch.autograd.grad(expected, (ar, br), g.float())
    for fn in (example.swiglu, example.SwiGLUFunction.apply, *more):
        a, b = a0.clone().requires_grad_(), b0.clone().requires_grad_()
        out = fn(a, b)
        torch.testing.assert_close(out, expected.detach().to(out.dtype))
        grads = torch.autograd.grad(out, (a, b), g)
        torch.testing.assert_close(grads[0], da.to(grads[0].dtype))
        torch.testing.assert_close(grads[1], db.to(grads[1].dtype))
        assert grads[0].data_ptr() == a.data_ptr()  # written in place: no gradient buffer


def routes(example: Any, device: str) -> dict[str, int]:
    """How many calls of each op went to the dispatcher in one opreg step (4x64 bf16): 0 means
    the direct call served it (``opreg_core``'s ``_direct_call``), counted with the tests' spy
    on the op's entry into the dispatcher (tests/conftest.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from conftest import _entries  # the spy the direct call's tests use

    a = torch.randn(4, 64, device=device, dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn_like(a, requires_grad=True)
    with _entries(example.swiglu) as forward, _entries(example.swiglu_backward_) as backward:
        torch.autograd.grad(example.swiglu(a, b), (a, b), torch.ones_like(a))
    return {"swiglu": forward[0], "swiglu_backward_": backward[0]}


def _inputs(shape: tuple[int, int], device: str) -> dict[str, tuple[torch.Tensor, ...]]:
    """Per contender its own leaves (a, b) and their initial values, and one gradient."""
    gen = torch.Generator(device=device).manual_seed(0)
    a0 = torch.randn(shape, device=device, dtype=torch.bfloat16, generator=gen)
    b0 = torch.randn(shape, device=device, dtype=torch.bfloat16, generator=gen)
    g = torch.randn(shape, device=device, dtype=torch.bfloat16, generator=gen)
    return {
        "a0": (a0,), "b0": (b0,), "g": (g,),
        "leaves": (a0.clone().requires_grad_(), b0.clone().requires_grad_()),
    }  # fmt: skip


def time_synced(
    steps: dict[str, Callable[..., Any]], shape: tuple[int, int], device: str, reps: int,
    sync: Callable[[], None],
) -> dict[str, list[float]]:  # fmt: skip
    """Per contender, the wall time of each of ``reps`` synchronised steps (us)."""
    data = {name: _inputs(shape, device) for name in steps}
    names = list(steps)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps + 5):  # 5 warm-up steps each
        order = names if rep % 2 == 0 else names[::-1]  # neither always goes first
        for name in order:
            d = data[name]
            a, b = d["leaves"]
            with torch.no_grad():
                a.copy_(d["a0"][0])
                b.copy_(d["b0"][0])
            sync()
            start = time.perf_counter()
            steps[name](a, b, d["g"][0])
            sync()
            if rep >= 5:
                samples[name].append((time.perf_counter() - start) * 1e6)
    return samples


def time_queued(
    steps: dict[str, Callable[..., Any]], shape: tuple[int, int], device: str, blocks: int,
    per_block: int, sync: Callable[[], None],
) -> dict[str, list[float]]:  # fmt: skip
    """Per contender, the time per step of each of ``blocks`` blocks of queued steps (us)."""
    data = {name: _inputs(shape, device) for name in steps}
    names = list(steps)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for block in range(blocks + 1):  # 1 warm-up block each
        order = names if block % 2 == 0 else names[::-1]
        for name in order:
            d = data[name]
            a, b = d["leaves"]
            g = d["g"][0]
            fn = steps[name]
            sync()
            start = time.perf_counter()
            for _ in range(per_block):
                fn(a, b, g)
            sync()
            if block >= 1:
                samples[name].append((time.perf_counter() - start) / per_block * 1e6)
    return samples


def host_parts(example: Any, device: str, calls: int, rounds: int) -> list[Row]:
    """Host time per call of each piece of a step, 4x64 bf16 (module docstring)."""
    a = torch.randn(4, 64, device=device, dtype=torch.bfloat16)
    b, g = torch.randn_like(a), torch.randn_like(a)
    ag, bg = a.clone().requires_grad_(), b.clone().requires_grad_()
    parts: dict[str, Callable[[], Any]] = {
        "forward launcher": lambda: example.swiglu_forward(a, b),
        "Function forward, grad": lambda: example.SwiGLUFunction.apply(ag, bg),
        "opreg forward, grad": lambda: example.swiglu(ag, bg),
        "Function forward, no grad": lambda: example.SwiGLUFunction.apply(a, b),
        "opreg forward, no grad": lambda: example.swiglu(a, b),
        "in-place launcher": lambda: example.swiglu_backward_inplace(a, b, g),
        "swiglu_backward_ op": lambda: example.swiglu_backward_(a, b, g),
    }
    samples = host_us_rounds(list(parts.values()), calls, rounds)
    return [
        {"part": name, "us": statistics.median(times)}
        for name, times in zip(parts, samples, strict=True)
    ]


def _shapes(text: str) -> list[tuple[int, int]]:
    """``--shapes``: ``"8192x4096,4x64"`` -> ``[(8192, 4096), (4, 64)]``."""
    shapes = []
    for item in text.split(","):
        rows, sep, cols = item.strip().partition("x")
        if not (sep and rows.isdigit() and cols.isdigit() and int(rows) and int(cols)):
            raise argparse.ArgumentTypeError(f"{item!r} is not ROWSxCOLS (e.g. 8192x4096)")
        shapes.append((int(rows), int(cols)))
    return shapes


def _ratio(samples: dict[str, list[float]], name: str, reference: str) -> float:
    return statistics.median(x / y for x, y in zip(samples[name], samples[reference], strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None, help="cuda (default when present) or cpu")
    parser.add_argument("--reps", type=int, default=1000, help="synced steps per contender")
    parser.add_argument("--blocks", type=int, default=41, help="queued blocks per contender")
    parser.add_argument("--steps", type=int, default=50, help="queued steps per block")
    parser.add_argument(
        "--shapes", type=_shapes, default=None,
        help="comma-separated ROWSxCOLS (default on CUDA: 8192x4096,16384x8192,4x64; on CPU 4x64)",
    )  # fmt: skip
    parser.add_argument("--json", metavar="PATH", help="also write the results to PATH")
    args = parser.parse_args()
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    device = args.device or ("cuda" if torch.cuda.is_available() and not interpreted else "cpu")
    if device == "cuda" and (interpreted or not torch.cuda.is_available()):
        sys.exit("--device cuda needs a CUDA device and compiled Triton kernels")
    if device == "cpu" and not interpreted:
        sys.exit("on CPU the kernels need Triton's interpreter: set TRITON_INTERPRET=1")
    example = load_example()
    diagnostic = launching_op(example)
    if device == "cpu":
        example.use_triton_on_cpu()
        triton_kernel_info(diagnostic).add_device_type("cpu")
    check(example, device, diagnostic)
    entries = routes(example, device)
    print(f"dispatcher entries in one opreg step (0: the direct call): {entries}")
    sync: Callable[[], None] = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    steps = contenders(example, diagnostic)
    shapes = args.shapes or (CUDA_SHAPES if device == "cuda" else [(4, 64)])
    if device == "cpu":  # the interpreter: seconds per step at most, and the figures mean nothing
        args.reps, args.blocks, args.steps = min(args.reps, 20), min(args.blocks, 3), 2
    print(
        f"torch {torch.__version__} | device {device}"
        + (f" ({torch.cuda.get_device_name()})" if device == "cuda" else " (Triton interpreter)")
        + f" | synced: median of {args.reps} steps | queued: median of {args.blocks} blocks "
        f"of {args.steps} steps"
    )
    print(
        "| shape | timing | launchers us | Function us | opreg us | opreg/Function | target | "
        "diagnostic: launching backward us | diagnostic/Function |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    results: list[Row] = []
    for shape in shapes:
        for timing in ("synced", "queued"):
            if timing == "synced":
                samples = time_synced(steps, shape, device, args.reps, sync)
            else:
                samples = time_queued(steps, shape, device, args.blocks, args.steps, sync)
            us = {name: statistics.median(v) for name, v in samples.items()}
            ratio = _ratio(samples, "opreg", "Function")
            diagnostic_ratio = _ratio(samples, DIAGNOSTIC, "Function")
            label = f"{shape[0]}x{shape[1]} bf16"
            print(
                f"| {label} | {timing} | {us['launchers']:.1f} | {us['Function']:.1f} | "
                f"{us['opreg']:.1f} | {ratio:.3f} | <= {TARGET:.2f} | {us[DIAGNOSTIC]:.1f} | "
                f"{diagnostic_ratio:.3f} |"
            )
            results.append(
                {"shape": list(shape), "dtype": "bfloat16", "timing": timing, **us,
                 "ratio": ratio, "diagnostic_ratio": diagnostic_ratio,
                 "function_over_launchers": _ratio(samples, "Function", "launchers")}
            )  # fmt: skip
    calls, rounds = (1000, 21) if device == "cuda" else (2, 2)
    parts = host_parts(example, device, calls, rounds)
    print(f"\nhost time per call, 4x64 bf16, {rounds} rounds of {calls} queued calls:\n")
    print("| part | us |")
    print("|---|---|")
    for part in parts:
        print(f"| {part['part']} | {part['us']:.1f} |")
    if args.json:
        write_json(
            args.json, "bench_swiglu", {**vars(args), "device": device},
            {"steps": results, "host_parts": parts, "dispatcher_entries": entries},
        )  # fmt: skip


if __name__ == "__main__":
    main()
