"""The dispatcher kernel that runs a Triton launcher for one op on one device type.

:func:`make_triton_kernel` builds the function registered with the dispatcher for one
device type (the launchers themselves live with each op, in ``ops/*/triton_kernels.py``).

Per call it (1) decides once, lazily, whether Triton can run at all (if not, the
op's PyTorch fallback serves the call), (2) runs the launcher with the tensors'
device made current (PyTorch does not guard Python kernels, and an unguarded
Triton launch on a second GPU fails or poisons Triton's per-device state), and
(3) turns compile/launch failures into a :class:`TritonKernelError`; one raised while the
device's current stream is capturing a CUDA graph says to warm the op up first (a first
call compiles, and an autotuned kernel benchmarks its configs, neither of which a capturing
stream permits). Under Triton's interpreter the launcher runs through
:func:`~opreg_kernels._interpreter_autotune.interpreted_launch`, so that autotuned kernels
work there (each config runs once and the configs are compared).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType, TracebackType
from typing import Any, NamedTuple, cast

import torch

from ._availability import has_triton, triton_interpreted
from ._errors import TritonKernelError
from ._private import cuda_current_device, cuda_set_device, wrap_triton_disabled

__all__ = [
    "Launcher",
    "eager_launcher",
    "first_tensor",
    "is_caller_error",
    "make_triton_kernel",
    "raised_in_triton",
    "resolve_launcher",
]

#: A Triton launcher: a callable, or ``"package.module:function"`` imported on first launch
#: (so that modules defining ``@triton.jit`` kernels are only imported when one runs).
Launcher = Callable[..., Any] | str

_UNGUARDED_DEVICE_TYPES = frozenset({"cpu", "meta"})

#: Why a launch failed inside a CUDA graph capture, and what to do.
CAPTURE_HINT = (
    "the launch happened while a CUDA graph was being captured: an op's first call with new "
    "shapes or dtypes compiles its kernel, and an autotuned kernel (@triton.autotune) "
    "benchmarks its configs, neither of which a capturing stream permits. Warm up first: call "
    "the op once with the same shapes, dtypes and device outside the capture "
    '(torch.compile\'s mode="reduce-overhead" warms up by itself)'
)


class _DeviceSwitch(NamedTuple):
    """How to read and set the current device of one device type (``torch.cuda``-like)."""

    current_device: Callable[[], int]
    set_device: Callable[[int], None]


def resolve_launcher(launcher: Launcher) -> Callable[..., Any]:
    """Return the callable a launcher spec names, importing its module if needed."""
    if not isinstance(launcher, str):
        return launcher
    module_name, _, attr = launcher.partition(":")
    module: ModuleType = importlib.import_module(module_name)
    return cast(Callable[..., Any], getattr(module, attr))


def eager_launcher(launcher: Launcher) -> Callable[..., Any]:
    """A compiler-visible op's launcher as eager runs it: with ``torch.library.wrap_triton``'s
    dispatch off, so that ``wrap_triton(kernel)`` hands back the kernel itself and a launch
    costs what a plain ``kernel[grid](...)`` costs (see ``_compiler_visible``).

    A ``"package.module:function"`` launcher is still imported on its first launch; an import
    failure then surfaces from the dispatcher kernel as a ``TritonKernelError``, as before.
    One Python frame is added to a launch.
    """
    return wrap_triton_disabled(lambda: resolve_launcher(launcher))


def _device_switch(device_type: str) -> _DeviceSwitch | None:
    """The device switch of a device type, or None if it has no current device to switch."""
    if device_type in _UNGUARDED_DEVICE_TYPES:
        return None
    if device_type == "cuda" and cuda_current_device is not None and cuda_set_device is not None:
        if torch.cuda.device_count() <= 1:  # one visible GPU: it is always the current one
            return None
        # Cheaper than torch.cuda's functions (see _private); CUDA is initialised by the
        # time a CUDA tensor reaches the kernel.
        return _DeviceSwitch(cuda_current_device, cuda_set_device)
    try:
        module = torch.get_device_module(device_type)
    except (RuntimeError, AttributeError, ValueError):
        return None
    get, put = getattr(module, "current_device", None), getattr(module, "set_device", None)
    return _DeviceSwitch(get, put) if callable(get) and callable(put) else None


def first_tensor(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """The first tensor argument (in lists and tuples too), or None without one."""
    if args and isinstance(args[0], torch.Tensor):  # the common case, without building a tuple
        return args[0]
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value
        if isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, torch.Tensor):
                    return item
    return None


def stream_capturing(device_type: str, index: int) -> bool:
    """Whether the current stream of the device is capturing a graph (False if unknown)."""
    if device_type != "cuda":
        return False
    try:
        if index < 0:
            return torch.cuda.is_current_stream_capturing()
        with torch.cuda.device(index):
            return torch.cuda.is_current_stream_capturing()
    except Exception:  # no CUDA in this build, or none initialised: nothing is capturing
        return False


def raised_in_triton(traceback: TracebackType | None) -> bool:
    """Whether a frame of Triton's own package is on ``traceback`` (not a ``triton_*`` module)."""
    while traceback is not None:
        name = str(traceback.tb_frame.f_globals.get("__name__", ""))
        if name == "triton" or name.startswith("triton."):
            return True
        traceback = traceback.tb_next
    return False


def is_caller_error(exc: Exception) -> bool:
    """Errors that say nothing about the kernel: input checks, out of memory, nested failures."""
    if isinstance(exc, (TritonKernelError, torch.OutOfMemoryError)):
        return True
    return isinstance(exc, (TypeError, ValueError)) and not raised_in_triton(exc.__traceback__)


def make_triton_kernel(
    op_name: str, device_type: str, launcher: Launcher, fallback: Callable[..., Any]
) -> Callable[..., Any]:
    """A dispatcher kernel for ``device_type`` that runs ``launcher`` (see module docstring).

    ``fallback`` serves every call when Triton is unavailable or disabled; launcher
    errors other than input checks (TypeError/ValueError raised outside Triton) and
    out-of-memory become :class:`TritonKernelError` naming ``op_name`` and the device.
    """
    run: Callable[..., Any] | None = None
    guard: _DeviceSwitch | None = None

    def resolve() -> Callable[..., Any]:
        nonlocal run, guard
        if not has_triton():
            run = fallback
            return run
        try:
            resolved = resolve_launcher(launcher)
        except Exception as exc:
            raise TritonKernelError(op_name, device_type, exc) from exc
        guard = _device_switch(device_type)
        if triton_interpreted():
            from ._interpreter_autotune import interpreted_launch

            resolved = interpreted_launch(resolved)
        run = resolved
        return run

    def kernel(*args: Any, **kwargs: Any) -> Any:
        launch = run if run is not None else resolve()
        if launch is fallback:
            return fallback(*args, **kwargs)
        index = -1
        try:
            if guard is None:
                return launch(*args, **kwargs)
            tensor = first_tensor(args, kwargs)
            index = -1 if tensor is None else tensor.get_device()
            if index < 0:
                return launch(*args, **kwargs)
            current = guard.current_device()
            if index == current:
                return launch(*args, **kwargs)
            guard.set_device(index)
            try:
                return launch(*args, **kwargs)
            finally:
                guard.set_device(current)
        except Exception as exc:
            if is_caller_error(exc):
                raise
            device = f"{device_type}:{index}" if index >= 0 else device_type
            hint = CAPTURE_HINT if stream_capturing(device_type, index) else None
            raise TritonKernelError(op_name, device, exc, hint=hint) from exc

    kernel.__name__ = f"triton_kernel_{device_type}"
    kernel.__qualname__ = kernel.__name__
    return kernel
