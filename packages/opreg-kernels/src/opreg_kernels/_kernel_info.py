"""``TritonKernelInfo``: which device types of one op run its Triton launcher, and a way to
change that. It lives with the op, in ``op.extensions["opreg_kernels.triton"]``, so that
``opreg_core.unregister`` and a re-registration drop it with the op, calling its ``release()``
first (which undoes what the registration put outside the op: the compiler-visible rules)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from opreg_core import KernelHandle, VmapOp, device_type_name, get_op

from ._dispatch_kernel import Launcher, eager_launcher, make_triton_kernel

__all__ = ["EXTENSION_KEY", "TritonKernelInfo", "triton_kernel_info"]

#: The key of an op's :class:`TritonKernelInfo` in ``VmapOp.extensions``.
EXTENSION_KEY = "opreg_kernels.triton"

_logger = logging.getLogger("opreg_kernels")


class TritonKernelInfo:
    """The Triton kernels of one op: which device types got one, and a way to add more.

    Obtain it with :func:`triton_kernel_info`. ``requested_device_types`` is what
    the registration asked for; ``device_types`` is what is registered now;
    ``skipped_device_types`` are the requested ones this torch build does not know;
    ``compiler_visible`` is the registration's option of that name (``torch.compile`` sees the
    kernels on ``device_types``).
    """

    def __init__(
        self,
        op: VmapOp[Any, Any],
        launcher: Launcher,
        batched_launcher: Launcher | None,
        requested_device_types: frozenset[str],
        compiler_visible: bool = False,
    ) -> None:
        self.op = op
        self.launcher = launcher
        self.batched_launcher = batched_launcher
        self.requested_device_types = requested_device_types
        self.compiler_visible = compiler_visible
        self._handles: dict[str, list[KernelHandle]] = {}
        self._skipped: set[str] = set()
        self._lock = threading.Lock()
        self._on_release: list[Callable[[], None]] = []

    @property
    def device_types(self) -> frozenset[str]:
        """Device types whose calls run the Triton launcher (when Triton is available)."""
        with self._lock:
            return frozenset(d for d, hs in self._handles.items() if all(h.active for h in hs))

    @property
    def skipped_device_types(self) -> frozenset[str]:
        """Requested device types that this torch build does not know."""
        return frozenset(self._skipped)

    @property
    def has_batched_kernel(self) -> bool:
        """True if ``vmap`` of the op runs a Triton launcher (``triton_vmap_fn``) too."""
        return self.batched_launcher is not None

    def add_device_type(self, device_type: str) -> bool:
        """Serve ``device_type`` with the Triton launcher; False if torch does not know it."""
        if not isinstance(device_type, str):
            raise TypeError(
                f"opreg: {self.op.qualname}: device type must be a str, "
                f"got {type(device_type).__name__}"
            )
        device = device_type_name(device_type)
        op = self.op
        with self._lock:
            handles: list[KernelHandle] = []
            try:
                kernel = make_triton_kernel(
                    op.qualname, device, self._eager(self.launcher), op.fallback
                )
                handles.append(op.register_kernel(device, kernel))
                if self.batched_launcher is not None and op.vmap_fn is not None:
                    kernel = make_triton_kernel(
                        f"{op.qualname} (vmap)",
                        device,
                        self._eager(self.batched_launcher),
                        op.vmap_fn,
                    )
                    handles.append(op.register_kernel(device, kernel, batched=True))
            except ValueError as exc:
                for handle in handles:
                    handle.remove()
                _logger.debug(
                    "%s: no Triton kernel for device type %r: %s", op.qualname, device, exc
                )
                self._skipped.add(device)
                return False
            self._skipped.discard(device)
            self._handles[device] = handles
        return True

    def _eager(self, launcher: Launcher) -> Launcher:
        """The launcher as the dispatcher kernel runs it (``wrap_triton`` off when visible)."""
        return eager_launcher(launcher) if self.compiler_visible else launcher

    def remove_device_type(self, device_type: str) -> bool:
        """Stop serving ``device_type`` with Triton (the fallback takes over again)."""
        device = device_type_name(device_type)
        with self._lock:
            handles = self._handles.pop(device, None)
        for handle in handles or ():
            handle.remove()
        return handles is not None

    def on_release(self, undo: Callable[[], None]) -> None:
        """Call ``undo`` when the op's registration ends (see :meth:`release`)."""
        self._on_release.append(undo)

    def release(self) -> None:
        """Undo what the registration put outside the op (opreg-core calls it when the op is
        unregistered or its name registered again; the op's kernels go with the op)."""
        while self._on_release:
            self._on_release.pop()()

    def __repr__(self) -> str:
        return (
            f"<TritonKernelInfo {self.op.qualname} device_types={sorted(self.device_types)} "
            f"skipped={sorted(self._skipped)} batched={self.has_batched_kernel}"
            f"{' compiler_visible' if self.compiler_visible else ''}>"
        )


def triton_kernel_info(op: VmapOp[Any, Any] | str) -> TritonKernelInfo:
    """The :class:`TritonKernelInfo` of an op registered by :func:`register_triton_op`.

    ``op`` is the op object or its qualified name; ValueError if it has no Triton kernels
    (never registered by ``register_triton_op``, unregistered since, or re-registered under
    its name as a plain op).
    """
    found: VmapOp[Any, Any] | None = None
    if isinstance(op, VmapOp):
        found = op
    elif isinstance(op, str):
        try:
            found = get_op(op)
        except KeyError:
            found = None
    info = found.extensions.get(EXTENSION_KEY) if found is not None else None
    if not isinstance(info, TritonKernelInfo):
        name = op if isinstance(op, str) else getattr(op, "qualname", None) or repr(op)
        raise ValueError(
            f"opreg: {name}: has no Triton kernels (not registered by register_triton_op)"
        )
    return info
