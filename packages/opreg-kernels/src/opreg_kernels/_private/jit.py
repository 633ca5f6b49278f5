"""Triton: a kernel's autotune/heuristics layers, and its JIT function's argument binder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Triton internals used here; checked only where Triton imports.
INTERNALS: tuple[str, ...] = (
    "triton.runtime.jit.JITFunction.device_caches",
    "triton.runtime.jit.JITFunction.pre_run_hooks",
    "triton.runtime.Autotuner",
    "triton.runtime.Heuristics",
    "triton.runtime.JITFunction",
    "triton.runtime.KernelInterface",
)


# Why: the public fast path (``FastKernel``) keys compiled kernels by Triton's own
# specialisation of the arguments (dtype and 16-byte alignment of pointers, integer width,
# divisibility by 16 and equality to 1, constexpr values, do_not_specialize, defaults), which
# only the per-device binder of a JIT function computes; Triton keeps it in
# ``JITFunction.device_caches[device]`` (kernel cache, key cache, target, backend, binder),
# and the binder returns (bound arguments, specialisation, options). Checked on Triton 3.6,
# 3.8, 3.9 (the same in each; ``FastKernel`` takes this path only on a Triton inside
# ``_versions.TESTED_TRITON``, else Triton's own ``kernel[grid](...)``). A launch is taken
# fast only while the function has no pre-run hook (Triton runs them on every call).
# Public replacement: a public "bind and specialise these arguments" on JITFunction.


def triton_binder(jit_function: Any, device: int) -> Callable[..., Any] | None:
    """``binder(*args, **kwargs) -> (bound arguments, specialisation, options)`` of a JIT
    function on ``device``, or None while it has pre-run hooks (those need Triton's launch)."""
    if jit_function.pre_run_hooks:
        return None
    binder: Callable[..., Any] = jit_function.device_caches[device][4]
    return binder


# Why: ``fast_launch`` unwraps ``@triton.autotune`` and ``@triton.heuristics`` down to the
# ``@triton.jit`` function below them; their classes live in ``triton.runtime`` (not
# re-exported by ``triton``), and each keeps the kernel it wraps in ``fn``. Checked on
# Triton 3.6, 3.8, 3.9. Public replacement: none (``triton.runtime``'s classes are what
# Triton's own code checks against).


def triton_kernel_layers(kernel: Any) -> tuple[tuple[tuple[bool, Any], ...], Any, bool] | None:
    """``(layers, inner, compiled)`` of a Triton kernel: the autotune/heuristics layers from the
    outermost (``(is_autotuner, layer)``), the kernel below them, and whether that is a
    compiled ``@triton.jit`` function (not an interpreted one); None if it is no Triton kernel.
    """
    from triton.runtime import Autotuner, Heuristics, JITFunction, KernelInterface

    layers: list[tuple[bool, Any]] = []
    inner = kernel
    while isinstance(inner, (Autotuner, Heuristics)):
        layers.append((isinstance(inner, Autotuner), inner))
        inner = inner.fn
    if not isinstance(inner, KernelInterface):
        return None
    return tuple(layers), inner, isinstance(inner, JITFunction)
