"""Running Triton kernels on CPU through Triton's interpreter (the device ``triton-cpu`` of
the checks, the plugin and ``opreg check``), and reading opreg-kernels' Triton information.

``TRITON_INTERPRET=1`` must be in the environment before Triton is first imported: Triton
decides between compiling and interpreting when ``@triton.jit`` runs, which is at import
time for the modules holding kernels and for Triton's own standard library (``import
triton``). ``torch._dynamo``/``torch._inductor`` import Triton, so the pytest plugin and
``opreg check`` set the variable before anything else runs; a kernel module imported
earlier (for CUDA) stays compiled for the GPU.

opreg-kernels is optional: it is imported only when Triton ops are asked for, and reached
only through its typed public functions.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opreg_core import VmapOp, device_type_name, registered_ops

from ._triton_cpu import TRITON_CPU, is_triton_cpu

if TYPE_CHECKING:
    import torch

    from opreg_kernels import TritonKernelInfo

    from .report import OpReport

#: The environment variable that makes ``@triton.jit`` kernels run in Triton's interpreter.
INTERPRET_ENV = "TRITON_INTERPRET"

#: The values of :data:`INTERPRET_ENV` that turn the interpreter on, compared case-insensitively
#: and without stripping: Triton's own rule (``triton.knobs.runtime.interpret``).
_INTERPRET_ON = frozenset({"1", "y", "yes", "true", "on"})


class TritonUnavailable(RuntimeError):
    """Triton (or opreg-kernels, for Triton ops) is not installed or cannot run here."""


def _installed(package: str) -> bool:
    """Whether ``package`` can be found (without importing it)."""
    if package in sys.modules:
        return sys.modules[package] is not None  # None: imports of it are blocked
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def triton_installed() -> bool:
    """Whether the ``triton`` package can be found (without importing it)."""
    return _installed("triton")


def kernels_installed() -> bool:
    """Whether opreg-kernels can be found (without importing it)."""
    return _installed("opreg_kernels")


def import_kernels() -> bool:
    """Import opreg-kernels if it is installed; False if it is not."""
    try:
        import opreg_kernels  # noqa: F401
    except ModuleNotFoundError as exc:
        if exc.name != "opreg_kernels":
            raise
        return False
    return True


def interpreter_enabled() -> bool:
    """Whether ``TRITON_INTERPRET`` turns Triton's interpreter on.

    Triton's own rule, without importing Triton (or torch): ``1``, ``y``, ``yes``, ``true`` or
    ``on``, in any case.
    """
    return os.environ.get(INTERPRET_ENV, "").lower() in _INTERPRET_ON


def enable_interpreter() -> None:
    """Set ``TRITON_INTERPRET=1``; best before Triton is imported (see the module docstring).

    Warns if Triton was already imported without it: Triton's own ``@triton.jit`` helpers
    (its standard library) were then compiled for the GPU, and kernels calling them fail on
    CPU with "Cannot call @triton.jit'd outside of the scope of a kernel".
    """
    if not interpreter_enabled() and sys.modules.get("triton") is not None:
        warnings.warn(
            f"{INTERPRET_ENV}=1 is set after Triton was imported: kernels that call Triton's "
            "standard library may fail on CPU. Set it before anything imports Triton "
            "(torch._dynamo and torch._inductor do).",
            RuntimeWarning,
            stacklevel=2,
        )
    os.environ[INTERPRET_ENV] = "1"


def start_interpreter(mode: str, *, needed: bool = False) -> None:
    """Turn Triton's interpreter on at start-up as ``mode`` says (``opreg check
    --triton-interpret``, the plugin's ``opreg_triton_interpret``): ``"on"``: always;
    ``"auto"``: when ``needed`` (e.g. the device triton-cpu was asked for) or when Triton is
    installed and no CUDA device is present; ``"off"``: never."""
    if mode == "on" or (mode == "auto" and (needed or _no_gpu_for_triton())):
        enable_interpreter()


def _no_gpu_for_triton() -> bool:
    """Triton is installed but has no CUDA device to compile for."""
    if not triton_installed():
        return False
    import torch

    return not torch.cuda.is_available()


def triton_info(op: VmapOp[Any, Any] | str) -> TritonKernelInfo | None:
    """opreg-kernels' ``TritonKernelInfo`` of ``op`` (the op or its qualified name), or None
    for an op without Triton kernels. Never imports opreg-kernels: without it loaded, no op
    has Triton kernels."""
    if sys.modules.get("opreg_kernels") is None:
        return None
    from opreg_kernels import triton_kernel_info

    try:
        return triton_kernel_info(op)
    except ValueError:
        return None


def kernels_without_triton() -> bool:
    """Whether opreg-kernels is installed but cannot run Triton kernels here (its
    ``has_triton()`` is False: Triton absent, broken or disabled); imports opreg-kernels."""
    if not import_kernels():
        return False
    from opreg_kernels import has_triton

    return not has_triton()


def _import_failure(what: str, exc: BaseException) -> str:
    """``what`` fails to import (the error's first line), and how to fix it."""
    lines = str(exc).strip().splitlines()
    error = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if missing and missing.partition(".")[0] != "triton":
        fix = (
            f"install {missing.partition('.')[0]} (pip install 'opreg-kernels[triton]' "
            "brings what Triton's interpreter needs)"
        )
    else:
        fix = "reinstall Triton (pip install --force-reinstall 'opreg-kernels[triton]')"
    return f"{what} fails to import ({error}); {fix}"


def triton_problem() -> str | None:
    """Why opreg-kernels' Triton kernels cannot run in this process at all, or None.

    Triton or opreg-kernels absent, Triton disabled by ``OPREG_DISABLE_TRITON``, or Triton
    failing to import (with the import error). Imports opreg-kernels and Triton: call it after
    the decision about Triton's interpreter (:func:`start_interpreter`).
    """
    if not triton_installed():
        return "Triton is not installed (pip install 'opreg-kernels[triton]')"
    if not import_kernels():
        return "opreg-kernels is not installed (pip install 'opreg-testing[kernels]')"
    from opreg_kernels import DISABLE_ENV_VAR, has_triton

    with warnings.catch_warnings():  # its warning about a broken Triton: the caller says it
        warnings.simplefilter("ignore", RuntimeWarning)
        available = has_triton()
    if available:
        return None
    if os.environ.get(DISABLE_ENV_VAR, "").strip():
        return f"Triton is disabled by {DISABLE_ENV_VAR}={os.environ[DISABLE_ENV_VAR]}"
    try:
        importlib.import_module("triton")
    except Exception as exc:  # a broken install can raise anything while importing
        return _import_failure("Triton is installed but", exc)
    return "Triton is unavailable (opreg_kernels.has_triton() is False)"


def triton_cpu_problem() -> str | None:
    """Why Triton kernels cannot run on CPU here (the device ``triton-cpu``), or None.

    :func:`triton_problem`, Triton's interpreter off (``TRITON_INTERPRET`` not set at
    start-up), or the interpreter failing to import (it needs numpy, which Triton does not
    require). Imports Triton, like :func:`triton_problem`.
    """
    problem = triton_problem()
    if problem is not None:
        return problem
    if not interpreter_enabled():
        return (
            f"Triton's interpreter is off ({INTERPRET_ENV}=1 was not set at start-up): "
            "opreg check --triton-interpret on, or --opreg-triton-interpret=on under pytest"
        )
    try:
        importlib.import_module("triton.runtime.interpreter")
    except Exception as exc:
        return _import_failure("Triton's interpreter", exc)
    return None


def triton_served(op: VmapOp[Any, Any] | str, device: str) -> bool:
    """Whether the checks of ``op`` on ``device`` (a device name of the checks, e.g.
    ``"cpu"``, ``"cuda:1"``, ``"triton-cpu"``) run its Triton kernel, not its fallback."""
    info = triton_info(op)
    if info is None:
        return False
    if is_triton_cpu(device):
        return triton_cpu_problem() is None
    if device_type_name(device) not in info.device_types:
        return False
    return (triton_cpu_problem() if device_type_name(device) == "cpu" else triton_problem()) is None


def triton_ran(report: OpReport) -> bool:
    """Whether a check of ``report`` (one op on one device) ran (passed or failed) with the
    op's Triton kernel serving the device."""
    ran = any(not result.skipped for result in report.results)
    return ran and triton_served(report.op, report.device)


def kernel_name(op: VmapOp[Any, Any] | str) -> str:
    """The name of a Triton op's launcher (``triton_fn``: a function or its import string)."""
    info = triton_info(op)
    launcher: Any = None if info is None else info.launcher
    if isinstance(launcher, str):
        return launcher
    name = getattr(launcher, "__qualname__", None) or getattr(launcher, "__name__", None)
    return str(name) if name else repr(launcher)


def kernel_not_run_reason(devices: Sequence[str]) -> str:
    """Why no check of a Triton op ran its Triton kernel on any of ``devices``, and the fix."""
    problem = triton_problem()
    if problem is not None:
        return problem
    on_cuda = [d for d in devices if device_type_name(d) == "cuda"]
    if on_cuda:
        return f"every check of it skipped on {', '.join(on_cuda)}"
    cpu_problem = triton_cpu_problem()
    if cpu_problem is not None:
        import torch

        if torch.cuda.is_available():
            return f"{cpu_problem}; or check it on CUDA (--device cuda)"
        return f"no CUDA device is present, and {cpu_problem}"
    if TRITON_CPU not in devices:
        return (
            f"the devices of this run ({', '.join(devices)}) do not include {TRITON_CPU}, "
            f"where it runs on CPU: add it (--device {TRITON_CPU}, or "
            f"--opreg-device={TRITON_CPU} under pytest)"
        )
    return f"every check of it skipped on {TRITON_CPU}"


@dataclass
class TritonDeviceChanges:
    """What :func:`triton_device` changed, so that it can undo exactly that (it yields this)."""

    device_type: str
    ops: list[str] = field(default_factory=list)  #: ops that got a kernel for the device type
    previous_env: str | None = None
    registered_type: bool = False  #: whether it became a default Triton device type

    def add(self, op: VmapOp[Any, Any]) -> bool:
        """Give ``op`` (a Triton op) a kernel for the device type; False if it is not one."""
        info = triton_info(op)
        if info is None or self.device_type in info.device_types:
            return False
        if info.add_device_type(self.device_type):
            self.ops.append(op.qualname)
            return True
        return False


def _restore_env(previous: str | None) -> None:
    if previous is None:
        os.environ.pop(INTERPRET_ENV, None)
    else:
        os.environ[INTERPRET_ENV] = previous


@contextmanager
def triton_device(
    device_type: str = "cpu",
    ops: Iterable[VmapOp[Any, Any]] | None = None,
    *,
    interpret: bool = True,
) -> Iterator[TritonDeviceChanges]:
    """Serve ``device_type`` with the Triton kernels of opreg-kernels ops, then undo it.

    With ``interpret`` (default) ``TRITON_INTERPRET=1`` is set for the duration, and every op
    in ``ops`` (default: every live Triton op) gets a kernel for the device type, which also
    becomes a default Triton device type, so that Triton ops registered inside the block get
    it too. On exit exactly these changes are undone and the environment restored. Raises
    :class:`TritonUnavailable` without Triton or opreg-kernels, and when Triton (or its
    interpreter) fails to import or is disabled: the message says why.
    """
    if not triton_installed():
        raise TritonUnavailable("Triton is not installed")
    if not import_kernels():
        raise TritonUnavailable(
            "opreg-kernels is not installed (pip install 'opreg-testing[kernels]')"
        )
    from opreg_kernels import (
        register_triton_device_type,
        triton_device_types,
        unregister_triton_device_type,
    )

    changes = TritonDeviceChanges(
        device_type_name(device_type), previous_env=os.environ.get(INTERPRET_ENV)
    )
    try:
        if interpret:
            enable_interpreter()  # warns if too late
        problem = triton_cpu_problem() if interpret else triton_problem()
        if problem is not None:
            raise TritonUnavailable(problem)
        if changes.device_type not in triton_device_types():
            register_triton_device_type(changes.device_type)
            changes.registered_type = True
        for op in registered_ops() if ops is None else ops:
            changes.add(op)
        yield changes
    finally:
        for qualname in changes.ops:
            info = triton_info(qualname)
            if info is not None:
                info.remove_device_type(changes.device_type)
        if changes.registered_type:
            unregister_triton_device_type(changes.device_type)
        _restore_env(changes.previous_env)


def device_and_serving(
    device: str | torch.device | None,
) -> tuple[str | torch.device | None, AbstractContextManager[Any]]:
    """The device checks run on for ``device``, and the context they run in: for ``triton-cpu``
    the CPU with every Triton op's Triton kernel serving it (:func:`triton_device`); for any
    other device that device, as it is."""
    if is_triton_cpu(device):
        return "cpu", triton_device("cpu")
    return device, nullcontext()
