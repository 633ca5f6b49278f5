"""Launch a ``@triton.jit`` kernel without ``JITFunction.run``'s per-call Python work.

``kernel[grid](...)`` binds the arguments, computes Triton's specialisation key
(dtype and 16-byte alignment of each pointer, divisibility by 16 / equality to 1
of each integer), looks up the compiled kernel, builds launch metadata and only
then launches: about 15 us of host time per call. :class:`FastLaunch` keeps the
compiled kernel per *caller-computed* key (the launcher knows which arguments
vary) and calls the compiled launcher directly. The first call for a key (and
every call under the interpreter, or while a launch hook such as a profiler is
installed) goes through ``kernel[grid](...)``, so compilation, caching on disk
and error reporting stay Triton's. The compiled kernel's launch interface (a Triton
internal) is reached through :mod:`opreg_kernels._private`.

The key must determine Triton's specialisation: the launchers include the
device index, each pointer's dtype and ``data_ptr() % 16 == 0``, and for each
specialised integer ``value == 1``, ``value % 16 == 0`` and whether it fits int32.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from triton import knobs

from ._availability import triton_interpreted
from ._private import compiled_kernel_launcher, cuda_raw_stream, launch_hooks_idle

__all__ = ["INTERPRET", "FastLaunch", "int_spec"]

#: Whether Triton runs kernels in its interpreter (``TRITON_INTERPRET``, read as Triton reads
#: it, when the first kernel module is imported: Triton decides when ``@triton.jit`` runs).
INTERPRET: bool = triton_interpreted()
_RUNTIME = knobs.runtime


def int_spec(value: int) -> int:
    """The part of Triton's specialisation of an integer argument, as one small int."""
    if value == 1:
        return 1
    return (2 if value % 16 == 0 else 0) | (4 if -(2**31) <= value < 2**31 else 0)


class FastLaunch:
    """Compiled-kernel cache of one ``@triton.jit`` function (see module docstring)."""

    __slots__ = ("_cache", "_enabled", "fn")

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self._cache: dict[Any, Callable[..., None]] = {}
        self._enabled = not INTERPRET and cuda_raw_stream is not None

    def __call__(
        self, key: Any, grid: int, device: int, args: tuple[Any, ...], num_warps: int,
        constexprs: dict[str, Any],
    ) -> None:  # fmt: skip
        """Launch ``fn[(grid,)](*args, **constexprs, num_warps=num_warps)`` on ``device``.

        ``args`` are the non-constexpr arguments in signature order and ``constexprs``
        the constexpr ones, in signature order too (they follow ``args``).
        """
        launch = self._cache.get(key) if self._enabled else None
        if launch is not None and cuda_raw_stream is not None and launch_hooks_idle(_RUNTIME):
            launch(grid, 1, 1, cuda_raw_stream(device), *args, *constexprs.values())
            return
        compiled = self.fn[(grid,)](*args, **constexprs, num_warps=num_warps)
        if self._enabled and compiled is not None:
            try:
                self._cache[key] = compiled_kernel_launcher(compiled)
            except Exception:  # pragma: no cover - a Triton without it: keep the slow path
                self._enabled = False

    def clear(self) -> None:
        """Forget the compiled kernels (the next launch of each key goes through Triton)."""
        self._cache.clear()
