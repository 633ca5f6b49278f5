"""Every torch and Triton internal that opreg-kernels relies on, and nothing else.

A torch or Triton upgrade that drops or changes one of these breaks here, in one place:
``tests/test_private_boundaries.py`` names each entry of :data:`INTERNALS` that no longer
resolves, and fails on any internal used outside this module. Each entry says why it is
needed and which public API would replace it.

Importing this module imports neither Triton nor a GPU driver: the Triton internals are
reached only through objects that Triton itself handed to the caller (a compiled kernel,
the runtime knobs); :data:`INTERNALS` is data (the test imports Triton to check its names).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch

from ._versions import LAUNCHER_LAYOUTS, triton_release

__all__ = [
    "INTERNALS",
    "LAYOUT_INTERNALS",
    "UNKNOWN_SHAPE",
    "autotune_benchmark_call",
    "autotuner_base_fn",
    "autotuner_config",
    "compiled_kernel_launcher",
    "cuda_current_device",
    "cuda_launch_layout",
    "cuda_launcher_shape",
    "cuda_raw_stream",
    "cuda_set_device",
    "decomposable_types",
    "destroy_library",
    "export_keeps_triton_ops",
    "functional_tensor_mode",
    "functorch_wrapped",
    "heuristics_options",
    "launch_hooks_idle",
    "launcher_shape",
    "lend_triton_driver",
    "set_autotuner_best_config",
    "triton_benchmarker",
    "triton_binder",
    "triton_default_driver",
    "triton_kernel_layers",
    "wrap_triton_disabled",
]

#: torch internals that exist only in builds with CUDA (or ROCm) support.
_CUDA_INTERNALS = (
    "torch._C._cuda_getDevice",
    "torch._C._cuda_setDevice",
    "torch._C._cuda_getCurrentRawStream",
)
#: Triton internals; checked only where Triton imports. ``CompiledKernel.function`` and
#: ``.packed_metadata`` are instance attributes set by its methods (the resolver allows that).
_TRITON_INTERNALS = (
    "triton.compiler.CompiledKernel.run",
    "triton.compiler.CompiledKernel.function",
    "triton.compiler.CompiledKernel.packed_metadata",
    "triton.knobs.runtime.launch_enter_hook.calls",
    "triton.knobs.runtime.launch_exit_hook.calls",
    "triton.runtime.driver.driver",
    "triton.runtime.driver.DriverConfig._active",
    "triton.runtime.driver.DriverConfig.set_active",
    "triton.runtime.driver.DriverConfig.default",
    "triton.runtime.autotuner.Autotuner._bench.kernel_call.self",
    "triton.runtime.autotuner.Autotuner._bench.kernel_call.config",
    "triton.runtime.autotuner.Autotuner._bench.kernel_call.full_nargs",
    "triton.runtime.Autotuner",
    "triton.runtime.Heuristics",
    "triton.runtime.JITFunction",
    "triton.runtime.KernelInterface",
    "triton.backends.nvidia.driver.CudaLauncher.__call__",
    "triton.backends.nvidia.driver.CudaLauncher.__init__",
    "triton.backends.nvidia.driver.CudaLauncher.launch",
    "triton.backends.nvidia.driver.CudaLauncher.global_scratch_size",
    "triton.backends.nvidia.driver.CudaLauncher.profile_scratch_size",
    "triton.backends.nvidia.driver.CudaLauncher.launch_cooperative_grid",
    "triton.backends.nvidia.driver.CudaLauncher.launch_pdl",
    "triton.runtime.jit.JITFunction.device_caches",
    "triton.runtime.jit.JITFunction.pre_run_hooks",
    "triton.runtime.autotuner.Autotuner.cache",
    "triton.runtime.autotuner.Autotuner.configs",
    "triton.runtime.autotuner.Autotuner.keys",
    "triton.runtime.autotuner.Autotuner.arg_names",
    "triton.runtime.autotuner.Heuristics.values",
    "triton.runtime.autotuner.Heuristics.arg_names",
    "triton.runtime.autotuner.Autotuner.best_config",
    "triton.runtime.autotuner.Autotuner.base_fn",
    "triton.backends.driver.DriverBase.get_benchmarker",
)
#: torch internals of the derivative guard (``_derivative_guard.py``), in every build.
_FUNCTORCH_INTERNALS = ("torch._C._functorch.is_functorch_wrapped_tensor",)
#: torch internals of the compiler-visible mode (``_compiler_visible.py``), in every build.
_COMPILER_VISIBLE_INTERNALS = (
    "torch._subclasses.functional_tensor.FunctionalTensorMode",
    "torch._subclasses.functional_tensor.FunctionalTensor",
    "torch._subclasses.fake_tensor.FakeTensor",
    "torch._library.triton.wrap_triton_enabled",
    "torch._library.triton.wrap_triton_enabled_default",
    "torch.export._trace.custom_triton_ops_decomposition_disabled",
    "torch.library.Library._destroy",
)
#: Dotted names of every internal used here (those of one launcher layout only: below).
INTERNALS: tuple[str, ...] = (
    _CUDA_INTERNALS + _TRITON_INTERNALS + _COMPILER_VISIBLE_INTERNALS + _FUNCTORCH_INTERNALS
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

# -- torch: the current CUDA device and stream ---------------------------------------------
# Why: the dispatcher kernel switches to the tensors' device around each launch, and the fast
# launch passes the current stream to the compiled kernel. The public functions
# (torch.cuda.current_device / set_device, torch.cuda.current_stream(i).cuda_stream) re-check
# lazy initialisation and build a Stream object on every call: about a third of a microsecond
# more per launch. Public replacement: those functions, should they become as cheap.
# None in torch builds without CUDA (callers then use torch.get_device_module's functions, or
# Triton's own launch path). Checked on torch 2.11, 2.13, 2.14, 2.15 (present in each CUDA
# build; their behaviour is tested on a CUDA device only).

#: ``torch.cuda.current_device()`` without its per-call checks (None without CUDA support).
cuda_current_device: Callable[[], int] | None = getattr(torch._C, "_cuda_getDevice", None)
#: ``torch.cuda.set_device(index)`` without its per-call checks (None without CUDA support).
cuda_set_device: Callable[[int], None] | None = getattr(torch._C, "_cuda_setDevice", None)
#: The raw ``cudaStream_t`` of the current stream of a device index (None without CUDA).
cuda_raw_stream: Callable[[int], int] | None = getattr(torch._C, "_cuda_getCurrentRawStream", None)


# -- Triton: the compiled kernel's launch interface ----------------------------------------
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


# Why: an autotuned kernel's launch depends on the config its autotuner chose for the call's
# key (the values of its ``key`` arguments and the dtypes of the arguments), which
# ``Autotuner.run`` computes inline and keeps in ``Autotuner.cache``; the fast path computes
# the same key (as ``Autotuner.run`` does) and reads the chosen config, and leaves every call
# whose key was never tuned to Triton. Checked on Triton 3.6, 3.8, 3.9 (the same key in each;
# 3.8 adds a cache entry without benchmarking where pruning leaves one config, which a later
# call reads here as any other). Public replacement: a public "config for these arguments"
# on Autotuner.


def autotuner_config(autotuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The config ``autotuner.run(*args, **kwargs)`` would launch with, or None if it would
    benchmark first (a key it has not tuned yet)."""
    configs = autotuner.configs
    if len(configs) <= 1:
        return configs[0]
    names = autotuner.arg_names
    given = dict(zip(names, args, strict=False))
    given.update((k, v) for k, v in kwargs.items() if k in names)
    key = [given[k] for k in autotuner.keys if k in given]
    key.extend(str(v.dtype) for v in given.values() if hasattr(v, "dtype"))
    return autotuner.cache.get(tuple(key))


# Why: ``Autotuner.run`` records the config it launches with in ``best_config``, where users
# read which config was chosen (``kernel.best_config``, as Triton's tutorials print it); a
# launch that skips ``Autotuner.run`` records it the same way. Checked on Triton 3.6, 3.8,
# 3.9. Public replacement: the public "config for these arguments" above, recording it as
# ``run`` does.


def set_autotuner_best_config(autotuner: Any, config: Any) -> None:
    """Record ``config`` as the one ``autotuner`` launched with, as ``Autotuner.run`` does."""
    autotuner.best_config = config


# Why: ``@triton.heuristics`` computes its meta-parameters inline in ``Heuristics.run``
# (each heuristic, in order, sees the arguments by name, ``arg_names``, and the values
# before it; ``values`` maps each name to its function); a launch that skips
# ``Heuristics.run`` computes the same values. Checked on Triton 3.6, 3.8, 3.9 (the same
# ``Heuristics.run`` in each). Public replacement: a public "meta-parameters for these
# arguments" on Heuristics.


def heuristics_options(
    heuristics: Any, args: tuple[Any, ...], options: dict[str, Any]
) -> dict[str, Any]:
    """A new dict: ``options`` (the keyword arguments of a launch) plus the value of each
    heuristic of a ``@triton.heuristics`` layer, as ``Heuristics.run`` adds them."""
    options = dict(options)
    named = dict(zip(heuristics.arg_names, args, strict=False))
    for name, heuristic in heuristics.values.items():
        options[name] = heuristic({**named, **options})
    return options


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


# -- torch: the compiler-visible mode (``compiler_visible=True``) ------------------------------
# Why: a compiler-visible op decomposes into its launcher's ``wrap_triton`` kernel calls when
# AOTAutograd traces it, exactly as ``torch.library.triton_op`` does (torch/_library/triton.py,
# ``functional_decomp``): through a ``torch.library.register_torch_dispatch`` rule (public) for
# the mode AOTAutograd traces under, ``FunctionalTensorMode`` (private class). The rule
# accepts the tensor types torch's own rule accepts (plain, fake and functional tensors) and
# leaves the op opaque under ``torch.export``, as torch's does (a private query).
# Checked on torch 2.11, 2.13, 2.14, 2.15. Public replacement: ``torch.library.triton_op``
# with a per-device choice of decomposing (it traces the Triton body on every device, CPU
# included), or a public handle on the mode.
# The tensor modules are imported where they are first needed, not at ``import opreg_kernels``
# (torch versions that do not import them themselves would pay for them on every import).


def functional_tensor_mode() -> type:
    """``FunctionalTensorMode``, the mode a compiler-visible op's decomposition rule is for."""
    from torch._subclasses.functional_tensor import FunctionalTensorMode

    return FunctionalTensorMode


def decomposable_types(types: tuple[type, ...]) -> bool:
    """Whether a decomposition may run on these tensor types: plain, functional and fake
    tensors, as torch's rule decides (any other subclass gets NotImplemented first)."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch._subclasses.functional_tensor import FunctionalTensor

    return all(t in (torch.Tensor, FunctionalTensor) or issubclass(t, FakeTensor) for t in types)


def export_keeps_triton_ops() -> bool:
    """Whether ``torch.export`` is tracing, which keeps custom Triton ops whole (torch's rule)."""
    from torch.export._trace import custom_triton_ops_decomposition_disabled

    return bool(custom_triton_ops_decomposition_disabled())  # type: ignore[no-untyped-call]


# Why: an op's compiler-visible rules live in a ``torch.library.Library`` of their own, which
# must drop them when the op's registration ends (``opreg_core.unregister``, a re-registration):
# otherwise torch keeps a rule for a dead op and refuses a second rule for the name. Dropping
# the Library's registrations before it is garbage collected (never, while torch holds the
# rule) is private; opreg-core's ``_private`` wraps the same method for the op's own
# libraries. Checked on torch 2.11, 2.13, 2.14, 2.15. Public replacement: none (a public
# ``Library.destroy()``).
def destroy_library(library: torch.library.Library) -> None:
    """Remove every registration of ``library`` (here: torch_dispatch rules)."""
    library._destroy()  # type: ignore[no-untyped-call]


# Why: in eager a launcher calls ``torch.library.wrap_triton(kernel)[grid](...)`` with plain
# tensors; with wrap_triton's dispatch on, that call goes through the Triton higher-order op
# (hundreds of microseconds); off, ``wrap_triton`` returns the kernel itself. torch's own
# ``triton_op`` runs its function under ``set_wrap_triton_enabled(False)`` (a private context
# manager); its generator costs about a microsecond per call, so the thread-local flag it
# sets is set here directly. Checked on torch 2.11, 2.13, 2.14, 2.15. Public replacement:
# none (a public ``set_wrap_triton_enabled``).


def wrap_triton_disabled(resolve: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
    """A function that runs ``resolve()``'s function (resolved on its first call) with
    ``torch.library.wrap_triton``'s dispatch off (``wrap_triton`` then returns the kernel).
    ``torch._library.triton`` is imported on that first call too."""
    fn: Callable[..., Any] | None = None
    lib: Any = None
    state: Any = None

    def run(*args: Any, **kwargs: Any) -> Any:
        nonlocal fn, lib, state
        if fn is None:
            import torch._library.triton as lib

            state = lib.wrap_triton_enabled
            fn = resolve()
        previous = getattr(state, "value", lib.wrap_triton_enabled_default)
        state.value = False
        try:
            return fn(*args, **kwargs)
        finally:
            state.value = previous

    return run


# -- Triton: autotuning under the interpreter (``_interpreter_autotune.py``) ------------------
# Why: ``@triton.autotune`` times each config with ``driver.active.get_benchmarker()``, and
# under the interpreter on a machine without a GPU no driver is active ("0 active drivers").
# For the length of one opreg launch under the interpreter, a stand-in driver is lent to
# Triton (``DriverConfig.set_active``, the previous value read from ``_active``), whose
# benchmarker runs every config once and compares their results; comparing needs the
# arguments and config of each benchmark call, which Triton keeps only in the closure of
# the ``kernel_call`` function that ``Autotuner._bench`` builds (``self``, ``config``,
# ``full_nargs``). Checked on Triton 3.6, 3.8, 3.9 (the same ``DriverConfig`` and ``_bench``
# in each); a driver registry without ``_active``/``set_active`` gets no stand-in (Triton's
# own behaviour), a ``kernel_call`` of another shape runs without comparing. Public
# replacement: a benchmarker knob, or a ``do_bench`` that receives the config and
# arguments.


def lend_triton_driver(stand_in: Any) -> Callable[[], None]:
    """Make ``stand_in`` Triton's active driver; returns the function that undoes it (a
    Triton whose driver registry has another shape gets nothing lent: Triton's behaviour)."""
    from triton.runtime.driver import driver

    if not hasattr(driver, "_active") or not callable(getattr(driver, "set_active", None)):
        return lambda: None
    previous = driver._active

    def give_back() -> None:
        driver._active = previous

    driver.set_active(stand_in)
    return give_back


def triton_default_driver() -> Any:
    """Triton's own active driver (raises Triton's RuntimeError where none is active)."""
    from triton.runtime.driver import driver

    return driver.default


def autotune_benchmark_call(kernel_call: Any) -> tuple[Any, Any, dict[str, Any]] | None:
    """(autotuner, config, arguments by name) of one ``Autotuner._bench`` call, or None."""
    code = getattr(kernel_call, "__code__", None)
    cells = getattr(kernel_call, "__closure__", None)
    if code is None or cells is None:
        return None
    found = {name: cell.cell_contents for name, cell in zip(code.co_freevars, cells, strict=True)}
    nargs = found.get("full_nargs")
    if "self" not in found or "config" not in found or not isinstance(nargs, dict):
        return None
    return found["self"], found["config"], nargs


# Why: outside an opreg launch the stand-in driver's benchmarker does what Triton would do,
# through the active driver's own ``get_benchmarker()`` (a method of Triton's backend
# drivers); an error names the autotuned kernel by the Python function below the autotuner,
# ``Autotuner.base_fn`` (Triton's own messages use it). Checked on Triton 3.6, 3.8, 3.9.
# Public replacement: the benchmarker knob or config-aware ``do_bench`` above; a public name
# of an autotuned kernel.


def triton_benchmarker() -> Callable[..., Any]:
    """Triton's own benchmarker, the active driver's (raises Triton's RuntimeError where no
    driver is active)."""
    benchmarker: Callable[..., Any] = triton_default_driver().get_benchmarker()
    return benchmarker


def autotuner_base_fn(autotuner: Any) -> Any:
    """The Python function below an autotuner (``Autotuner.base_fn``), or None."""
    return getattr(autotuner, "base_fn", None)


# -- torch: functorch's wrapped tensors (``_derivative_guard.py``) -----------------------------
# Why: a backward (or jvp) that calls a Triton launcher directly fails under torch.func
# transforms, whose tensors are wrappers without storage; the guard names the op and says what
# to do instead only when such a wrapper reached it. Checked on torch 2.11, 2.13, 2.14, 2.15.
# Public replacement: none (a public "is this a functorch wrapper" query).


def functorch_wrapped(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a functorch wrapper (grad, jvp or vmap level), not a plain tensor."""
    return bool(torch._C._functorch.is_functorch_wrapped_tensor(tensor))
