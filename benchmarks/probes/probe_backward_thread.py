"""Where the mutating op's call in a backward goes on CUDA (issue #24's SwiGLU): the same call
timed inside a backward, which autograd runs on its CUDA device thread, and on the main thread.

    python benchmarks/probes/probe_backward_thread.py      (a CUDA device; from the repository root)

An op like examples/triton_swiglu.py's ``swiglu`` whose backward times, with
``time.perf_counter``, (a) one dispatch key-set read (what the direct call checks per tensor),
(b) three of the direct call's state checks, and (c) either the call of the mutating op
``swiglu_backward_`` or what a hand-written Function does instead (bump the versions, call the
in-place launcher); then the same calls on the main thread with grad off. 300 warm-up and 300
timed steps per variant, medians of the last two thirds. A diagnostic, not a benchmark:
perf_counter around single calls includes its own cost (about 0.1 us).
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
for folder in ("packages/opreg-core/src", "packages/opreg-kernels/src", "benchmarks"):
    sys.path.insert(0, str(ROOT / folder))

import bench_swiglu  # noqa: E402  (its load_example: examples/triton_swiglu.py)
from opreg_core import _private  # noqa: E402  (the direct call's own checks, to time them)
from opreg_kernels import register_triton_op  # noqa: E402


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA device")
    ex = bench_swiglu.load_example()
    times: dict[str, list[float]] = {}
    variant = ["op"]

    def record(name: str, start: float) -> None:
        times.setdefault(name, []).append((time.perf_counter() - start) * 1e6)

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(*inputs)

    def backward(ctx: Any, dc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = ctx.saved_tensors
        times.setdefault("backward on the main thread (0 or 1)", []).append(
            float(threading.current_thread() is threading.main_thread())
        )
        start = time.perf_counter()
        _private.dispatch_keys_raw(a)
        record("one key-set read, in the backward", start)
        start = time.perf_counter()
        _private.functorch_transforms_active(), _private.jit_tracing()
        _private.inplace_or_view_excluded()
        record("three state checks, in the backward", start)
        start = time.perf_counter()
        if variant[0] == "op":
            ex.swiglu_backward_(a, b, dc)
            record("mutating op call, in the backward", start)
        else:
            torch.autograd.graph.increment_version((a, b))
            ex.swiglu_backward_inplace(a, b, dc)
            record("bump + in-place launcher, in the backward", start)
        return a, b

    op = register_triton_op(
        name="probe_backward_thread::swiglu", fake_fn=ex._fake, triton_fn=ex.swiglu_forward,
        setup_context=setup, backward=backward,
    )(ex.swiglu.fallback)  # fmt: skip
    a = torch.randn(4, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn_like(a, requires_grad=True)
    g = torch.ones_like(a)
    for name in ("op", "launcher", "op", "launcher"):
        variant[0] = name
        for _ in range(300):
            torch.autograd.grad(op(a, b), (a, b), g)
        torch.cuda.synchronize()
    plain_a, plain_b = a.detach(), b.detach()
    with torch.no_grad():
        for _ in range(600):
            start = time.perf_counter()
            ex.swiglu_backward_(plain_a, plain_b, g)
            record("mutating op call, main thread", start)
            start = time.perf_counter()
            torch.autograd.graph.increment_version((plain_a, plain_b))
            ex.swiglu_backward_inplace(plain_a, plain_b, g)
            record("bump + in-place launcher, main thread", start)
            start = time.perf_counter()
            _private.dispatch_keys_raw(plain_a)
            record("one key-set read, main thread", start)
    torch.cuda.synchronize()
    print(f"torch {torch.__version__} | {torch.cuda.get_device_name()} | 4x64 bf16 | medians, us")
    for name, values in times.items():
        print(f"{name:42s} {statistics.median(values[len(values) // 3 :]):8.2f}")


if __name__ == "__main__":
    main()
