"""What the direct call's pieces cost per call on this host, on the main thread and inside a
backward on autograd's CUDA device thread (issue #24: the SwiGLU step's backward).

    python benchmarks/probes/probe_call_costs.py      (a CUDA device; from the repository root)

Each figure is the best of 5 timeit repeats of 2000 calls, per call, in ns: unlike
``probe_backward_thread.py`` (single calls between two ``perf_counter`` reads), no timer is
inside the figure. In the backward the loops run inside one backward call, on the thread that
runs CUDA backwards; if a piece costs the same there as on the main thread, the slowdown that
``probe_backward_thread.py`` saw (2.4x per call) comes from what a thread that wakes once per
step loses (caches, frequency), not from the thread itself. A diagnostic, not a benchmark.
"""

from __future__ import annotations

import sys
import threading
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
for folder in ("packages/opreg-core/src", "packages/opreg-kernels/src", "benchmarks"):
    sys.path.insert(0, str(ROOT / folder))

import bench_swiglu  # noqa: E402  (its load_example: examples/triton_swiglu.py)
from opreg_core import _private  # noqa: E402  (the direct call's own checks, to time them)


def pieces(
    a: torch.Tensor, b: torch.Tensor, g: torch.Tensor, ex: Any
) -> dict[str, Callable[[], Any]]:
    keys = torch._C._dispatch_keys
    held = keys(a)
    plain = keys(a)
    raw = _private.dispatch_keys_raw

    def py_call() -> None:
        return None

    def op_call() -> None:
        ex.swiglu_backward_(a, b, g)

    def bump_launch() -> None:
        torch.autograd.graph.increment_version((a, b))
        ex.swiglu_backward_inplace(a, b, g)

    state = (
        _private.compiling, _private.function_modes_active, _private.dispatch_modes_active,
        _private.functorch_transforms_active, _private.forward_ad_level,
        _private.profiler_enabled, _private.jit_tracing, _private.inplace_or_view_excluded,
    )  # fmt: skip

    def eight_state_checks() -> None:
        for check in state:
            check()

    set_excluded = torch._C._dispatch_tls_set_dispatch_key_excluded
    is_excluded = torch._C._dispatch_tls_is_dispatch_key_excluded
    inplace_key, autograd_key = (
        torch._C.DispatchKey.ADInplaceOrView, torch._C.DispatchKey.AutogradFunctionality,
    )  # fmt: skip

    def exclude_by_free_calls() -> None:
        was = is_excluded(autograd_key)
        set_excluded(inplace_key, True)
        set_excluded(autograd_key, True)
        try:
            pass
        finally:
            set_excluded(inplace_key, False)
            set_excluded(autograd_key, was)

    return {
        "empty Python call": py_call,
        "function_modes_active()": _private.function_modes_active,
        "dispatch_modes_active()": _private.dispatch_modes_active,
        "forward_ad_level()": _private.forward_ad_level,
        "profiler_enabled()": _private.profiler_enabled,
        "jit_tracing()": _private.jit_tracing,
        "inplace_or_view_excluded()": _private.inplace_or_view_excluded,
        "autograd_excluded()": _private.autograd_excluded,
        "torch.is_grad_enabled()": torch.is_grad_enabled,
        "exclusion by 5 free calls": exclude_by_free_calls,
        "a.is_neg()": lambda: a.is_neg(),
        "a.is_inference()": lambda: a.is_inference(),
        "a._is_zerotensor()": lambda: a._is_zerotensor(),
        "a.layout": lambda: a.layout,
        "a.is_nested": lambda: a.is_nested,
        "is_functorch_wrapped_tensor(a)": lambda: torch._C._functorch.is_functorch_wrapped_tensor(
            a
        ),
        "torch._is_functional_tensor(a)": lambda: torch._is_functional_tensor(a),
        "dispatch_keys_raw(a) (opreg's, a def)": lambda: raw(a),
        "_dispatch_keys(a).raw_repr() inline": lambda: keys(a).raw_repr(),
        "_dispatch_keys(a) only": lambda: keys(a),
        "held.raw_repr() only": lambda: held.raw_repr(),
        "_dispatch_keys(a) == plain": lambda: keys(a) == plain,
        "_dispatch_key_set(a) (str)": lambda: torch._C._dispatch_key_set(a),
        "a.is_cuda": lambda: a.is_cuda,
        "a.is_conj()": lambda: a.is_conj(),
        "a.requires_grad": lambda: a.requires_grad,
        "type(a) is Tensor": lambda: type(a) is torch.Tensor,
        "compiling()": _private.compiling,
        "functorch_transforms_active()": _private.functorch_transforms_active,
        "8 state checks (a loop)": eight_state_checks,
        "bump_versions([a, b])": lambda: _private.bump_versions([a, b]),
        "below ADInplaceOrView guard": lambda: _enter_exit(
            _private.AutoDispatchBelowADInplaceOrView
        ),
        "swiglu_backward_ op call": op_call,
        "bump + in-place launcher": bump_launch,
    }


def _enter_exit(guard: Any) -> None:
    with guard():
        pass


def measure(table: dict[str, Callable[[], Any]]) -> dict[str, float]:
    return {
        name: min(timeit.repeat(fn, number=2000, repeat=5)) / 2000 * 1e9
        for name, fn in table.items()
    }


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA device")
    ex = bench_swiglu.load_example()
    a = torch.randn(4, 64, device="cuda", dtype=torch.bfloat16)
    b, g = torch.randn_like(a), torch.randn_like(a)
    with torch.no_grad():
        main_thread = measure(pieces(a, b, g, ex))
    results: dict[str, dict[str, float]] = {}
    where: list[bool] = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x * 1

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            where.append(threading.current_thread() is threading.main_thread())
            results["backward"] = measure(pieces(a, b, g, ex))
            return grad

    x = torch.randn(4, 64, device="cuda", requires_grad=True)
    Probe.apply(x).sum().backward()
    torch.cuda.synchronize()
    print(f"torch {torch.__version__} | {torch.cuda.get_device_name()} | 4x64 bf16")
    print(f"the backward ran on the main thread: {where}")
    print("| piece | main thread ns | in the backward ns | ratio |")
    print("|---|---|---|---|")
    for name, value in main_thread.items():
        other = results["backward"][name]
        print(f"| {name} | {value:.0f} | {other:.0f} | {other / value:.2f} |")


if __name__ == "__main__":
    main()
