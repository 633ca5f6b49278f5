"""Triton: launching a compiled kernel, through its launcher or its C launcher directly."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from .._versions import LAUNCHER_LAYOUTS, triton_release

#: Triton internals used here (those of one launcher layout only: below); checked only where
#: Triton imports. ``CompiledKernel.function`` and ``.packed_metadata`` are instance
#: attributes set by its methods (the resolver allows that).
INTERNALS: tuple[str, ...] = (
    "triton.compiler.CompiledKernel.run",
    "triton.compiler.CompiledKernel.function",
    "triton.compiler.CompiledKernel.packed_metadata",
    "triton.knobs.runtime.launch_enter_hook.calls",
    "triton.knobs.runtime.launch_exit_hook.calls",
    "triton.backends.nvidia.driver.CudaLauncher.__call__",
    "triton.backends.nvidia.driver.CudaLauncher.__init__",
    "triton.backends.nvidia.driver.CudaLauncher.launch",
    "triton.backends.nvidia.driver.CudaLauncher.global_scratch_size",
    "triton.backends.nvidia.driver.CudaLauncher.profile_scratch_size",
    "triton.backends.nvidia.driver.CudaLauncher.launch_cooperative_grid",
    "triton.backends.nvidia.driver.CudaLauncher.launch_pdl",
)

#: ``CudaLauncher.__call__``'s parameters after ``self`` in each tested launcher layout
#: (``_versions.LAUNCHER_LAYOUTS`` says which Triton release has which).
_CALL_PARAMETERS: dict[str, tuple[str, ...]] = {
    "3.6": ("gridX", "gridY", "gridZ", "stream", "function", "*args"),
    "3.8+": (
        "gridX", "gridY", "gridZ", "stream", "function", "kernel_metadata", "launch_metadata",
        "launch_enter_hook", "launch_exit_hook", "*args",
    ),
}  # fmt: skip
#: The ``CudaLauncher`` attributes (set by its ``__init__``) that only one layout has.
_LAYOUT_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "3.6": (),
    "3.8+": ("arg_annotations", "kernel_signature", "gsan_enabled"),
}
#: Internals that only one launcher layout has, by layout: they resolve only on the Triton
#: releases of that layout (``tests/kernels/test_internals_contract.py`` checks the one in use).
LAYOUT_INTERNALS: dict[str, tuple[str, ...]] = {
    layout: tuple(f"triton.backends.nvidia.driver.CudaLauncher.{name}" for name in names)
    for layout, names in _LAYOUT_ATTRIBUTES.items()
}


# Why: ``kernel[grid](*args)`` spends about 15 us of host time per call binding arguments,
# computing the specialisation key and building launch metadata before it launches. The fast
# launch keeps the compiled kernel per key and calls its launcher directly, with the argument
# order of Triton's own ``CompiledKernel.__getitem__``: grid x/y/z, stream, function handle,
# packed metadata, launch metadata, enter hook, exit hook, then the kernel's arguments.
# Checked on Triton 3.6, 3.8, 3.9 (the same order in each); the callers take this path only on
# a Triton inside ``_versions.TESTED_TRITON``. Public replacement: none up to Triton 3.9
# (``CompiledKernel[grid](*args)`` still looks up the device, stream and launch metadata per
# call); a public "launch this compiled kernel" API.


def compiled_kernel_launcher(compiled: Any) -> Callable[..., None]:
    """``launch(grid_x, grid_y, grid_z, stream, *args)`` of a compiled kernel (what
    ``kernel[grid](...)`` returned); ``args``: every argument in signature order.

    The C launcher is called directly where :func:`cuda_launch_layout` knows its layout (and
    the kernel needs no scratch memory), else the compiled kernel's ``run``.
    Raises AttributeError if this Triton's compiled kernel lacks the launch interface.
    """
    run = compiled.run
    function = compiled.function
    packed = compiled.packed_metadata
    direct = _direct_cuda_launch(run, function, packed)
    if direct is not None:
        return direct

    def launch(grid_x: int, grid_y: int, grid_z: int, stream: int, *args: Any) -> None:
        run(grid_x, grid_y, grid_z, stream, function, packed, None, None, None, *args)

    return launch


# Why: on NVIDIA GPUs ``CompiledKernel.run`` is a ``CudaLauncher`` whose ``__call__`` (Python)
# allocates scratch memory when the kernel needs some, then calls the C launcher with the
# launch attributes it stored (cooperative grid, PDL) and the scratch pointers: about 2 us of
# host time per launch, mostly building a closure. For a kernel without scratch memory the C
# launcher is called directly with what ``__call__`` passes it, in the layout of the running
# Triton release (read from each release's ``CudaLauncher.__call__``):
#
# - "3.6" (Triton 3.6): grid x/y/z, stream, function, cooperative, pdl, global scratch,
#   profile scratch, then packed metadata, launch metadata, enter hook, exit hook and the
#   kernel's arguments, spread out;
# - "3.8+" (Triton 3.8, 3.9): grid x/y/z, stream, function, cooperative, pdl, packed
#   metadata, launch metadata, enter hook, exit hook, global scratch, profile scratch,
#   ``arg_annotations``, ``kernel_signature`` and the kernel's arguments as one tuple (a
#   launcher with GSan instrumentation, ``gsan_enabled``, adds arguments of its own: ``run``).
#
# The layout is taken only where both say so: the Triton release (``_versions.
# LAUNCHER_LAYOUTS``) and the shape of its ``CudaLauncher`` (``__call__``'s parameters, the
# attributes ``__init__`` sets), checked once; any other release (3.7, 3.10, ...) or shape
# launches through ``run``. ``tests/kernels/test_internals_contract.py`` compares what the
# direct call passes with what ``CudaLauncher.__call__`` passes, on a stand-in C launcher.
# Public replacement: none (a public "launch this compiled kernel" API).

#: :func:`cuda_launcher_shape`'s answer for a ``CudaLauncher`` of no tested layout.
UNKNOWN_SHAPE = "unknown"


def launcher_shape(launcher_class: type) -> str | None:
    """The tested layout whose shape ``launcher_class`` (a ``CudaLauncher``) has, or None:
    its ``__call__``'s parameters, and which layout-only attributes its ``__init__`` sets."""
    try:
        parameters = inspect.signature(launcher_class.__call__).parameters.values()
        sets = frozenset(vars(launcher_class)["__init__"].__code__.co_names)
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
    names = tuple(("*" if p.kind is p.VAR_POSITIONAL else "") + p.name for p in parameters)
    every = {name for own in _LAYOUT_ATTRIBUTES.values() for name in own}
    for layout, expected in _CALL_PARAMETERS.items():
        own = frozenset(_LAYOUT_ATTRIBUTES[layout])
        if names[1:] == expected and own <= sets and not (every - own) & sets:
            return layout
    return None


def cuda_launcher_shape() -> str | None:
    """The layout the running Triton's ``CudaLauncher`` has the shape of (:data:`UNKNOWN_SHAPE`
    if none), or None without an NVIDIA backend. Imports Triton."""
    try:
        from triton.backends.nvidia.driver import CudaLauncher
    except Exception:  # no NVIDIA backend in this Triton
        return None
    return launcher_shape(CudaLauncher) or UNKNOWN_SHAPE


@functools.cache
def cuda_launch_layout() -> str | None:
    """The layout in which the C launcher is called directly, or None (``run`` launches): the
    running Triton release's tested layout, where its ``CudaLauncher`` has that shape.
    Decided once per process (imports Triton)."""
    found = triton_release()
    expected = None if found is None else LAUNCHER_LAYOUTS.get(found)
    if expected is None or cuda_launcher_shape() != expected:
        return None
    return expected


def _direct_cuda_launch(run: Any, function: Any, packed: Any) -> Callable[..., None] | None:
    """The direct launch of a ``CudaLauncher`` without scratch memory, in the layout of
    :func:`cuda_launch_layout`, or None (no tested layout, other backends, kernels that need
    scratch memory or instrumentation)."""
    layout = cuda_launch_layout()
    if layout is None:
        return None
    from triton.backends.nvidia.driver import CudaLauncher

    if type(run) is not CudaLauncher:
        return None
    try:
        if run.global_scratch_size > 0 or run.profile_scratch_size > 0:
            return None
        c_launch = run.launch
        cooperative, pdl = bool(run.launch_cooperative_grid), bool(run.launch_pdl)
        if layout == "3.6":
            return _bind_36(c_launch, function, cooperative, pdl, packed)
        if run.gsan_enabled:
            return None
        return _bind_38(
            c_launch, function, cooperative, pdl, packed, run.arg_annotations,
            run.kernel_signature,
        )  # fmt: skip
    except AttributeError:
        return None


def _bind_36(
    c_launch: Callable[..., None], function: Any, cooperative: bool, pdl: bool, packed: Any
) -> Callable[..., None]:
    def launch(grid_x: int, grid_y: int, grid_z: int, stream: int, *args: Any) -> None:
        c_launch(
            grid_x, grid_y, grid_z, stream, function, cooperative, pdl, None, None, packed,
            None, None, None, *args,
        )  # fmt: skip

    return launch


def _bind_38(
    c_launch: Callable[..., None], function: Any, cooperative: bool, pdl: bool, packed: Any,
    annotations: Any, signature: Any,
) -> Callable[..., None]:  # fmt: skip
    def launch(grid_x: int, grid_y: int, grid_z: int, stream: int, *args: Any) -> None:
        c_launch(
            grid_x, grid_y, grid_z, stream, function, cooperative, pdl, packed, None, None,
            None, None, None, annotations, signature, args,
        )  # fmt: skip

    return launch


# Why: the direct launch above skips Triton's launch hooks (profilers such as Proton install
# them), so it is taken only while no hook is registered. Triton keeps them in a HookChain
# whose ``calls`` list holds the registered functions. Checked on Triton 3.6, 3.8, 3.9 (the
# same HookChain in each). Public replacement: a "hooks active" query on
# ``triton.knobs.runtime``.


def launch_hooks_idle(runtime: Any) -> bool:
    """Whether ``runtime`` (``triton.knobs.runtime``) has no launch hook registered."""
    for hook in (runtime.launch_enter_hook, runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return False
    return True
