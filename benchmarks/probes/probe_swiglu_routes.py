"""Which route of the in-place write costs least in a SwiGLU training step's backward
(issue #24), measured as bench_swiglu.py measures its steps (queued, 8192x4096 and 4x64 bf16).

    python benchmarks/probes/probe_swiglu_routes.py      (a CUDA device; from the repository root)

Each contender is the example's op (examples/triton_swiglu.py) with another backward:

- ``Function``: the hand-written Function (the baseline);
- ``opreg``: the example's op as it is (its backward calls ``swiglu_backward_``, the direct
  call);
- ``dispatcher (2 crossings)``: the backward calls ``swiglu_backward_.overload`` (opreg's
  ``ADInplaceOrView`` kernel, then its CUDA kernel, both in Python);
- ``torch.library, 1 crossing``: a mutating op registered with ``torch.library`` alone,
  whose CUDA kernel bumps the versions and launches (``ADInplaceOrView`` a fallthrough): what
  the dispatcher costs with one Python crossing;
- ``1 crossing + guard``: the same, called under ``_AutoDispatchBelowADInplaceOrView``;
- ``opreg overload below ADInplaceOrView``: bump, then ``swiglu_backward_.overload`` under
  that guard (opreg's route for such a write, without the direct call's checks);
- ``twin (opreg's kernel, 1 crossing)``: a torch.library op whose CUDA kernel bumps and runs
  the kernel opreg registered for ``swiglu_backward_``;
- ``launching``: bench_swiglu's diagnostic (bump and launch in the backward, no op).

A diagnostic for choosing a route, not a benchmark of opreg.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
for folder in ("packages/opreg-core/src", "packages/opreg-kernels/src", "benchmarks"):
    sys.path.insert(0, str(ROOT / folder))

import bench_swiglu  # noqa: E402
from opreg_kernels import register_triton_op  # noqa: E402

_LIBRARIES: list[Any] = []


def with_backward(ex: Any, name: str, write: Any) -> Any:
    """The example's op with a backward that writes the gradients through ``write``."""

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(*inputs)

    def backward(ctx: Any, dc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = ctx.saved_tensors
        write(a, b, dc)
        return a, b

    return register_triton_op(
        ex.swiglu.fallback, name=f"probe_swiglu_routes::{name}", fake_fn=ex._fake,
        triton_fn=ex.swiglu_forward, setup_context=setup, backward=backward,
    )  # fmt: skip


def guarded(write: Any) -> Any:
    """``write`` with the ADInplaceOrView (and autograd) keys excluded, as opreg's route does."""
    guard = torch._C._AutoDispatchBelowADInplaceOrView

    def run(a: torch.Tensor, b: torch.Tensor, dc: torch.Tensor) -> None:
        with guard():
            write(a, b, dc)

    return run


def bumped(write: Any) -> Any:
    bump = torch._C._increment_version

    def run(a: torch.Tensor, b: torch.Tensor, dc: torch.Tensor) -> None:
        bump([a, b])
        write(a, b, dc)

    return run


def one_crossing_op(ex: Any) -> Any:
    lib = torch.library.Library("probe_swiglu_routes", "FRAGMENT")
    lib.define("bwd_(Tensor(a!) a, Tensor(b!) b, Tensor dc) -> ()")
    bump = torch._C._increment_version

    def cuda(a: torch.Tensor, b: torch.Tensor, dc: torch.Tensor) -> None:
        bump([a, b])
        ex.swiglu_backward_inplace(a, b, dc)

    lib.impl("bwd_", cuda, "CUDA")
    lib.impl("bwd_", torch.library.fallthrough_kernel, "ADInplaceOrView")
    _LIBRARIES.append(lib)
    return torch.ops.probe_swiglu_routes.bwd_.default


def twin_op(ex: Any) -> Any:
    """A torch.library op whose CUDA kernel bumps and then runs the kernel opreg registered
    for ``swiglu_backward_`` on CUDA (its wrappers included): the one-crossing route with
    opreg's kernel, without a dispatch-key guard."""
    lib = torch.library.Library("probe_swiglu_routes", "FRAGMENT")
    lib.define("twin_(Tensor(a!) a, Tensor(b!) b, Tensor dc) -> ()")
    bump = torch._C._increment_version
    kernel = ex.swiglu_backward_._device_kernels.serving["cuda"].kernel

    def cuda(a: torch.Tensor, b: torch.Tensor, dc: torch.Tensor) -> None:
        bump([a, b])
        kernel(a, b, dc)

    lib.impl("twin_", cuda, "CUDA")
    lib.impl("twin_", torch.library.fallthrough_kernel, "ADInplaceOrView")
    _LIBRARIES.append(lib)
    return torch.ops.probe_swiglu_routes.twin_.default


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA device")
    ex = bench_swiglu.load_example()
    one = one_crossing_op(ex)
    ops = {
        "Function": ex.SwiGLUFunction.apply,
        "opreg": ex.swiglu,
        "dispatcher (2 crossings)": with_backward(ex, "two", ex.swiglu_backward_.overload),
        "torch.library, 1 crossing": with_backward(ex, "one", one),
        "1 crossing + guard": with_backward(ex, "guarded", guarded(one)),
        "opreg overload below ADInplaceOrView": with_backward(
            ex, "below", bumped(guarded(ex.swiglu_backward_.overload))
        ),
        "twin (opreg's kernel, 1 crossing)": with_backward(ex, "twin", twin_op(ex)),
        "launching": bench_swiglu.launching_op(ex),
    }
    bench_swiglu.check(ex, "cuda", *ops.values())

    def step(fn: Any) -> Any:
        return lambda a, b, g: torch.autograd.grad(fn(a, b), (a, b), g)

    steps = {name: step(fn) for name, fn in ops.items()}
    print(f"torch {torch.__version__} | {torch.cuda.get_device_name()} | queued, us per step")
    print("| shape | " + " | ".join(steps) + " |")
    print("|---|" + "---|" * len(steps))
    for shape in ((8192, 4096), (4, 64)):
        samples = bench_swiglu.time_queued(steps, shape, "cuda", 41, 50, torch.cuda.synchronize)
        cells = []
        for name in steps:
            us = statistics.median(samples[name])
            ratio = statistics.median(
                x / y for x, y in zip(samples[name], samples["Function"], strict=True)
            )
            cells.append(f"{us:.1f} ({ratio:.3f})")
        print(f"| {shape[0]}x{shape[1]} bf16 | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
