# mypy: disallow-untyped-defs=False, disallow-incomplete-defs=False
"""Launch a ``@triton.jit`` kernel without ``JITFunction.run``'s per-call Python work.

``kernel[grid](...)`` binds the arguments, computes Triton's specialisation key
(dtype and 16-byte alignment of each pointer, divisibility by 16 / equality to 1
of each integer), looks up the compiled kernel, builds launch metadata and only
then launches: about 15 us of host time per call. :class:`FastLaunch` keeps the
compiled kernel per *caller-computed* key (the launcher knows which arguments
vary) and calls the compiled launcher directly. The first call for a key (and
every call under the interpreter, or while a launch hook such as a profiler is
installed) goes through ``kernel[grid](...)``, so compilation, caching on disk
and error reporting stay Triton's.

The key must determine Triton's specialisation: the launchers include the
device index, each pointer's dtype and ``data_ptr() % 16 == 0``, and for each
specialised integer ``value == 1``, ``value % 16 == 0`` and whether it fits int32.
"""

from __future__ import annotations

import os
from typing import Any

import torch

__all__ = ["INTERPRET", "FastLaunch", "int_spec"]

try:  # Triton >= 3.4 keeps runtime knobs (the launch hooks) here
    from triton import knobs as _knobs

    _RUNTIME: Any = _knobs.runtime
except ImportError:  # pragma: no cover - older Triton: always take Triton's own path
    _RUNTIME = None

#: Whether Triton runs kernels in its interpreter (``TRITON_INTERPRET=1`` at import).
INTERPRET = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")
_current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def int_spec(value: int) -> int:
    """The part of Triton's specialisation of an integer argument, as one small int."""
    if value == 1:
        return 1
    return (2 if value % 16 == 0 else 0) | (4 if -(2**31) <= value < 2**31 else 0)


def _hooks_idle() -> bool:
    if _RUNTIME is None:
        return False
    for name in ("launch_enter_hook", "launch_exit_hook"):
        hook = getattr(_RUNTIME, name, None)
        if hook is not None and getattr(hook, "calls", True):
            return False
    return True


class FastLaunch:
    """Compiled-kernel cache of one ``@triton.jit`` function (see module docstring)."""

    __slots__ = ("_cache", "_enabled", "fn")

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self._cache: dict[Any, tuple[Any, Any, Any]] = {}
        self._enabled = not INTERPRET and _current_stream is not None and _RUNTIME is not None

    def __call__(
        self, key: Any, grid: int, device: int, args: tuple[Any, ...], num_warps: int,
        constexprs: dict[str, Any],
    ) -> None:  # fmt: skip
        """Launch ``fn[(grid,)](*args, **constexprs, num_warps=num_warps)`` on ``device``.

        ``args`` are the non-constexpr arguments in signature order and ``constexprs``
        the constexpr ones, in signature order too (they follow ``args``).
        """
        entry = self._cache.get(key) if self._enabled else None
        if entry is not None and _hooks_idle():
            run, function, packed = entry
            run(grid, 1, 1, _current_stream(device), function, packed, None, None, None,  # type: ignore[misc]
                *args, *constexprs.values())  # fmt: skip
            return
        compiled = self.fn[(grid,)](*args, **constexprs, num_warps=num_warps)
        if self._enabled and compiled is not None:
            try:
                self._cache[key] = (compiled.run, compiled.function, compiled.packed_metadata)
            except Exception:  # pragma: no cover - a Triton without these: keep the slow path
                self._enabled = False

    def clear(self) -> None:
        self._cache.clear()
