"""Launching a compiled Triton kernel without ``kernel[grid]``'s per-call Python work.

``kernel[grid](*args)`` spends most of its host time before the launch: Triton binds the
arguments, specialises them, builds a cache key, finds the compiled kernel, re-checks the
kernel's globals, builds launch metadata and calls the hooks. Both classes here keep the
compiled kernel under a key and call its launcher directly (the compiled kernel's launch
interface, a Triton internal, is reached through :mod:`opreg_kernels._private`); the first
call for a key, and every call that the fast path does not cover, goes through
``kernel[grid](...)`` itself, so compilation, caching, autotuning and error messages stay
Triton's. They differ in who computes the key:

- :class:`FastKernel` (``fast_launch(kernel)``, public): *Triton's own* specialisation of the
  arguments, computed by the JIT function's binder, so dtypes, 16-byte alignment of pointers,
  integer width, divisibility by 16 and equality to 1, ``None``, constexprs, defaults and
  ``do_not_specialize`` all count exactly as Triton counts them;
- :class:`FastLaunch` (the shipped ops' launchers): a key the launcher computes by hand (it
  knows which of its arguments vary), which skips the binder: about 3 µs less per launch on
  an H200 host. The key must determine Triton's specialisation: the shipped launchers include
  the device index, each pointer's dtype and ``data_ptr() % 16 == 0``, and for each
  specialised integer :func:`int_spec`.

What :class:`FastKernel` leaves to Triton:

- ``@triton.autotune``: the config is the one the autotuner chose for the call's key (read
  from its cache); a key it has not tuned yet, or a config with a ``pre_hook``, goes
  through Triton. ``@triton.heuristics`` values are computed on every call, as Triton does.
- Triton's interpreter, devices other than CUDA, a pre-run hook on the kernel or a launch
  hook (profilers), arguments Triton's binder refuses, and a failing fast launch (it is
  retried through Triton, which raises its own error): Triton's path.
- Tensors that are not plain tensors (``torch.compile`` tracing a compiler-visible op):
  ``torch.library.wrap_triton(kernel)[grid](...)``, so the kernel enters the graph.

Not re-checked on the fast path: whether a global variable the kernel reads has changed since
it was compiled (Triton raises then; here the compiled kernel keeps the value it was compiled
with).

Whether kernels run in Triton's interpreter is asked once per kernel, when its launcher is
built (:func:`~opreg_kernels._availability.triton_interpreted`): ``@triton.jit`` decides
between a compiled and an interpreted function when the kernel module is imported, and the
answer cannot change for that kernel afterwards.

Both classes take their fast path only on a Triton release inside
:data:`~opreg_kernels._versions.TESTED_TRITON` (asked when each is built); on any other
release every launch is Triton's own ``kernel[grid](...)``. Where the fast path is taken, the
compiled kernel is launched through its C launcher directly on the releases whose launcher
layout was tested (``_versions.LAUNCHER_LAYOUTS``), else through its ``run``.
:func:`fast_paths` says which of these this process takes, and why.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch

from opreg_core import FastPath

from ._availability import DISABLE_ENV_VAR, _disabled_by_env, has_triton, triton_interpreted
from ._private import (
    autotuner_config,
    compiled_kernel_launcher,
    cuda_current_device,
    cuda_launch_layout,
    cuda_launcher_shape,
    cuda_raw_stream,
    heuristics_options,
    launch_hooks_idle,
    set_autotuner_best_config,
    triton_binder,
    triton_kernel_layers,
)
from ._versions import (
    LAUNCHER_LAYOUTS,
    tested_layouts_text,
    tested_text,
    triton_release,
    triton_tested,
    triton_version,
)

__all__ = ["FastKernel", "FastLaunch", "fast_launch", "fast_paths", "int_spec"]

_Grid = Sequence[int] | Callable[[dict[str, Any]], Sequence[int]]
_TENSOR = torch.Tensor


def _no_cuda(*args: Any) -> int:  # pragma: no cover - never called: the fast path is off
    raise RuntimeError("opreg: this torch build has no CUDA support")


#: The current CUDA device and a device's raw current stream (see ``_private``). Without CUDA
#: support in this torch build the fast paths are off (``_enabled``) and these never run.
_current_device: Callable[[], int] = cuda_current_device or _no_cuda
_raw_stream: Callable[[int], int] = cuda_raw_stream or _no_cuda
_HAS_CUDA = cuda_current_device is not None and cuda_raw_stream is not None


# -- which fast paths this process takes ----------------------------------------------------

_LAUNCH_PATH = "fast CUDA launch"
_BINDER_PATH = "fast_launch binder"


def _unused(ask_device: bool = False) -> str | None:
    """Why no compiled kernel is launched on CUDA in this process (None: they are), with
    Triton imported; ``ask_device``: whether a CUDA device is present counts too."""
    if not _HAS_CUDA:
        return "this torch build has no CUDA"
    if triton_interpreted():
        return "Triton's interpreter runs the kernels"
    if ask_device and not torch.cuda.is_available():
        return "no CUDA device"
    return None


def _cached_launches() -> bool:
    """Whether :class:`FastKernel` and :class:`FastLaunch` take their fast path: a tested
    Triton release, CUDA, compiled kernels (asked when each is built)."""
    return _unused() is None and triton_tested()


def _no_triton() -> str:
    """Why Triton does not run here (``has_triton()`` is False)."""
    if importlib.util.find_spec("triton") is None:
        return "Triton not installed"
    if _disabled_by_env():
        return f"Triton disabled by {DISABLE_ENV_VAR}"
    return "Triton failed to import"


def _no_layout() -> str:
    """Why the C launcher is not called directly although the release is tested."""
    found = triton_release()
    expected = None if found is None else LAUNCHER_LAYOUTS.get(found)
    if expected is None:
        return f"no tested launcher layout (tested: {tested_layouts_text()})"
    shape = cuda_launcher_shape()
    if shape is None:
        return "no NVIDIA backend"
    return f"its CudaLauncher lacks the {expected} layout's shape ({shape})"


def fast_paths() -> tuple[FastPath, ...]:
    """Which of opreg-kernels' fast launch paths this process takes with its Triton, and why.

    ``"fast CUDA launch"``: a compiled kernel's C launcher called directly, in the launcher
    layout of a tested Triton release (else the compiled kernel's ``run``, or, on an untested
    release, Triton's own ``kernel[grid](...)``); ``"fast_launch binder"``: ``fast_launch``'s
    kernels keyed by Triton's own specialisation (else Triton's own launch). Imports Triton.
    """
    if not has_triton():
        why = _no_triton()
        return FastPath(_LAUNCH_PATH, False, why), FastPath(_BINDER_PATH, False, why)
    version = triton_version()
    if not triton_tested():
        why = f"Triton {version} is untested (tested: {tested_text()}): Triton's own launch"
        return FastPath(_LAUNCH_PATH, False, why), FastPath(_BINDER_PATH, False, why)
    unused = _unused(ask_device=True)
    layout = cuda_launch_layout()
    if layout is None:
        tail = f"; {unused}" if unused else ": CompiledKernel.run"
        launch = FastPath(_LAUNCH_PATH, False, f"Triton {version}: {_no_layout()}{tail}")
    elif unused:
        launch = FastPath(
            _LAUNCH_PATH, False, f"Triton {version}: the {layout} launcher layout, unused: {unused}"
        )
    else:
        launch = FastPath(_LAUNCH_PATH, True, f"Triton {version}: the {layout} launcher layout")
    if unused:
        binder = FastPath(_BINDER_PATH, False, f"Triton {version}: {unused}: Triton's own launch")
    else:
        binder = FastPath(
            _BINDER_PATH, True, f"Triton {version}: Triton's own specialisation (its binder)"
        )
    return launch, binder


# -- the shipped ops' launches: a key computed by hand --------------------------------------


def int_spec(value: int) -> int:
    """The part of Triton's specialisation of an integer argument, as one small int."""
    if value == 1:
        return 1
    return (2 if value % 16 == 0 else 0) | (4 if -(2**31) <= value < 2**31 else 0)


class FastLaunch:
    """Compiled-kernel cache of one ``@triton.jit`` function under keys its launcher computes
    (see module docstring); build it where the kernel is defined, at the module's import."""

    __slots__ = ("_cache", "_enabled", "_runtime", "fn")

    def __init__(self, fn: Any) -> None:
        from triton import knobs

        self.fn = fn
        self._cache: dict[Any, Callable[..., None]] = {}
        self._runtime = knobs.runtime
        # Asked now, when the kernel module is imported: @triton.jit has just decided.
        self._enabled = _cached_launches()

    def __call__(
        self, key: Any, grid: int, device: int, args: tuple[Any, ...], num_warps: int,
        constexprs: dict[str, Any], options: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        """Launch ``fn[(grid,)](*args, **constexprs, num_warps=num_warps, **options)`` on
        ``device``.

        ``args`` are the non-constexpr arguments in signature order and ``constexprs``
        the constexpr ones, in signature order too (they follow ``args``). ``options``: compile
        options (``enable_fp_fusion``), which the key must determine as well.
        """
        launch = self._cache.get(key) if self._enabled else None
        if launch is not None and launch_hooks_idle(self._runtime):
            launch(grid, 1, 1, _raw_stream(device), *args, *constexprs.values())
            return
        compiled = self.fn[(grid,)](*args, **constexprs, num_warps=num_warps, **(options or {}))
        if self._enabled and compiled is not None:
            try:
                self._cache[key] = compiled_kernel_launcher(compiled)
            except Exception:  # pragma: no cover - a Triton without it: keep the slow path
                self._enabled = False

    def clear(self) -> None:
        """Forget the compiled kernels (the next launch of each key goes through Triton)."""
        self._cache.clear()


# -- a user's kernel: Triton's own key ------------------------------------------------------


class FastKernel:
    """A ``@triton.jit`` kernel (autotuned or with heuristics, or not) launched through its
    compiled kernel once Triton has compiled it for a specialisation (module docstring).

    Launch it as the kernel itself: ``fast[grid](*args, **kwargs)``; ``kernel`` is the
    wrapped kernel, for everything else (``fast.kernel.best_config``, ``warmup``);
    ``fast_calls`` counts the launches that took the fast path.
    """

    __slots__ = (
        "_cache", "_config_kwargs", "_enabled", "_jit", "_layers", "_runtime", "fast_calls",
        "kernel",
    )  # fmt: skip

    def __init__(self, kernel: Any) -> None:
        from triton import knobs

        found = triton_kernel_layers(kernel)
        if found is None:
            raise TypeError(
                "opreg: fast_launch() takes a @triton.jit kernel (under @triton.autotune or "
                f"@triton.heuristics or not), got {type(kernel).__name__}"
            )
        layers, inner, compiled = found
        self.kernel = kernel
        self._jit = inner
        self._layers = layers
        self._runtime = knobs.runtime
        self._cache: dict[Any, tuple[Callable[..., None], Any]] = {}
        self._config_kwargs: dict[Any, dict[str, Any]] = {}
        self.fast_calls = 0
        # The interpreter replaces @triton.jit functions by interpreted ones, and an untested
        # Triton release may bind or launch differently: Triton's path.
        self._enabled = compiled and _cached_launches()

    def __getitem__(self, grid: _Grid) -> Callable[..., Any]:
        """``fast[grid]``: a function that launches the kernel on ``grid`` with its arguments."""
        return partial(self._launch, grid)  # no Python frame of its own, unlike a closure

    def run(self, grid: _Grid, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Launch on ``grid`` (a tuple of up to 3 sizes, or a function of the arguments by
        name, as Triton takes it); returns what ``kernel[grid](...)`` returns."""
        return self._launch(grid, *args, **kwargs)

    def _launch(self, grid: _Grid, /, *args: Any, **kwargs: Any) -> Any:
        """:meth:`run`, with the arguments as the kernel takes them (``fast[grid]`` calls it)."""
        if not self._enabled:
            return self.kernel[grid](*args, **kwargs)
        # A tensor that is not a plain tensor (fake, functional: traced for the compiler).
        for value in args:
            if type(value) is not _TENSOR and isinstance(value, _TENSOR):
                return torch.library.wrap_triton(self.kernel)[grid](*args, **kwargs)
        for value in kwargs.values():
            if type(value) is not _TENSOR and isinstance(value, _TENSOR):
                return torch.library.wrap_triton(self.kernel)[grid](*args, **kwargs)
        device = _current_device()
        found = self._lookup(device, args, kwargs)
        if found is None or found[2] is None or not launch_hooks_idle(self._runtime):
            compiled = self.kernel[grid](*args, **kwargs)
            if compiled is not None and (found is None or found[2] is None):
                self._remember(device, args, kwargs, found, compiled)
            return compiled
        bound, (launch, compiled) = found[1], found[2]
        sizes = grid(bound) if callable(grid) else grid
        count = len(sizes)
        try:
            launch(
                sizes[0], sizes[1] if count > 1 else 1, sizes[2] if count > 2 else 1,
                _raw_stream(device), *bound.values(),
            )  # fmt: skip
        except Exception:  # nothing was launched: Triton's path raises its own error
            return self.kernel[grid](*args, **kwargs)
        self.fast_calls += 1
        return compiled

    def _lookup(
        self, device: int, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Any, dict[str, Any], tuple[Callable[..., None], Any] | None] | None:
        """``(key, bound arguments, cached launch or None)`` of a launch, or None when the
        fast path does not cover it (an untuned autotune key, a config ``pre_hook``, a
        pre-run hook, arguments Triton's binder refuses or a key that cannot be hashed)."""
        try:
            options = kwargs
            for is_autotuner, layer in self._layers:
                if is_autotuner:
                    config = autotuner_config(layer, args, options)
                    if config is None or config.pre_hook is not None:
                        return None  # Triton tunes first / runs the hook
                    set_autotuner_best_config(layer, config)
                    options = {**options, **self._config(config)}
                else:  # Heuristics.run: each value sees the arguments and the ones before it
                    options = heuristics_options(layer, args, options)
            binder = triton_binder(self._jit, device)
            if binder is None:
                return None
            bound, specialization, launch_options = binder(*args, **options)
            # One flat tuple: the specialisation has one entry per parameter, so the launch
            # options that follow cannot be mistaken for it.
            key = (device, *specialization, *launch_options.items())
            return key, bound, self._cache.get(key)
        except Exception:  # Triton's own launch raises its own error for these arguments
            return None

    def _remember(
        self, device: int, args: tuple[Any, ...], kwargs: dict[str, Any], found: Any,
        compiled: Any,
    ) -> None:  # fmt: skip
        """Keep the kernel Triton just compiled (or found) for these arguments; after an
        autotuner tuned a new key, its config is known now, so the key is looked up again."""
        if found is None:
            found = self._lookup(device, args, kwargs)
            if found is None or found[2] is not None:
                return
        try:
            self._cache[found[0]] = (compiled_kernel_launcher(compiled), compiled)
        except AttributeError:  # pragma: no cover - a Triton without the launch interface
            self._enabled = False

    def _config(self, config: Any) -> dict[str, Any]:
        """``config.all_kwargs()``, built once per config."""
        kwargs = self._config_kwargs.get(config)
        if kwargs is None:
            kwargs = self._config_kwargs[config] = config.all_kwargs()
        return kwargs

    def clear(self) -> None:
        """Forget the compiled kernels (the next launch of each goes through Triton)."""
        self._cache.clear()
        self._config_kwargs.clear()


def fast_launch(kernel: Any) -> FastKernel:
    """Wrap a ``@triton.jit`` kernel (autotuned or not) so that launching it costs what the
    shipped ops' launches cost: ``fast_launch(kernel)[grid](*args)`` or as a decorator above
    ``@triton.jit``/``@triton.autotune``. Results are those of ``kernel[grid](*args)``."""
    if isinstance(kernel, FastKernel):
        return kernel
    return FastKernel(kernel)
