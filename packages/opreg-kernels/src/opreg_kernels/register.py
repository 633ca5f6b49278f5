"""``register_triton_op``: an opreg op whose Triton launcher serves chosen device types.

Builds on :func:`opreg_core.register_vmap_op` (the decorated function is the
fallback everywhere) and adds one :func:`~opreg_kernels.launch.make_triton_kernel`
per Triton device type through :meth:`opreg_core.VmapOp.register_kernel`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ParamSpec, TypeVar, cast, overload

import torch

from opreg_core import (
    KernelHandle,
    SampleInput,
    ShardingSpec,
    VmapOp,
    default_name,
    register_vmap_op,
)

from .backend import normalize_device_type, triton_device_types
from .launch import Launcher, make_triton_kernel

__all__ = ["TritonKernelInfo", "register_triton_op", "triton_kernel_info"]

P = ParamSpec("P")
R = TypeVar("R")
SampleInputs = Callable[[torch.device], Iterable[SampleInput]]

_logger = logging.getLogger("opreg_kernels")
_infos: dict[str, TritonKernelInfo] = {}
_infos_lock = threading.Lock()


class TritonKernelInfo:
    """The Triton kernels of one op: which device types got one, and a way to add more.

    Obtain it with :func:`triton_kernel_info`. ``requested_device_types`` is what
    the registration asked for; ``device_types`` is what is registered now;
    ``skipped_device_types`` are the requested ones this torch build does not know.
    """

    def __init__(
        self,
        op: VmapOp[Any, Any],
        launcher: Launcher,
        batched_launcher: Launcher | None,
        requested_device_types: frozenset[str],
    ) -> None:
        self.op = op
        self.launcher = launcher
        self.batched_launcher = batched_launcher
        self.requested_device_types = requested_device_types
        self._handles: dict[str, list[KernelHandle]] = {}
        self._skipped: set[str] = set()
        self._lock = threading.Lock()

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
        device = normalize_device_type(device_type)
        op = self.op
        with self._lock:
            handles: list[KernelHandle] = []
            try:
                handles.append(op.register_kernel(device, self._kernel(device, batched=False)))
                if self.batched_launcher is not None:
                    kernel = self._kernel(device, batched=True)
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

    def remove_device_type(self, device_type: str) -> bool:
        """Stop serving ``device_type`` with Triton (the fallback takes over again)."""
        device = normalize_device_type(device_type)
        with self._lock:
            handles = self._handles.pop(device, None)
        for handle in handles or ():
            handle.remove()
        return handles is not None

    def _kernel(self, device: str, *, batched: bool) -> Callable[..., Any]:
        op = self.op
        if batched:
            assert self.batched_launcher is not None and op.vmap_fn is not None
            return make_triton_kernel(
                f"{op.qualname} (vmap)", device, self.batched_launcher, op.vmap_fn
            )
        return make_triton_kernel(op.qualname, device, self.launcher, op.fallback)

    def __repr__(self) -> str:
        return (
            f"<TritonKernelInfo {self.op.qualname} device_types={sorted(self.device_types)} "
            f"skipped={sorted(self._skipped)} batched={self.has_batched_kernel}>"
        )


def triton_kernel_info(op: VmapOp[Any, Any] | str) -> TritonKernelInfo:
    """The :class:`TritonKernelInfo` of an op registered by :func:`register_triton_op`.

    ``op`` is the op object or its qualified name; ValueError if it has no Triton kernels.
    """
    qualname = op if isinstance(op, str) else getattr(op, "qualname", None)
    info = _infos.get(qualname) if isinstance(qualname, str) else None
    if info is None:
        raise ValueError(f"opreg: {qualname or op!r} was not registered by register_triton_op")
    return info


def _device_type_set(qualname: str, value: object) -> frozenset[str]:
    """Normalise ``triton_device_types``: None (the global set), a str, or a sequence of str."""
    if value is None:
        return triton_device_types()
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, (list, tuple, set, frozenset)) or not all(
        isinstance(v, str) for v in items
    ):
        raise TypeError(
            f"opreg: {qualname}: triton_device_types must be None, a str or a sequence of str, "
            f"got {value!r}"
        )
    names = frozenset(normalize_device_type(v) for v in items)
    if "" in names:
        raise ValueError(f"opreg: {qualname}: triton_device_types contains an empty device type")
    return names


def _check_launcher(qualname: str, label: str, value: object) -> Launcher:
    """``value`` as a launcher, or a TypeError naming the op."""
    if callable(value):
        return cast(Launcher, value)
    if isinstance(value, str):
        module, sep, attr = value.partition(":")
        if module and sep and attr.isidentifier():
            return value
    raise TypeError(
        f"opreg: {qualname}: {label} must be a callable or a 'package.module:function' string, "
        f"got {value!r}"
    )


@overload
def register_triton_op(
    fn: Callable[P, R],
    /,
    *,
    fake_fn: Callable[..., Any] | None = None,
    triton_fn: Launcher | None = None,
    vmap_fn: Callable[..., Any] | None = None,
    fake_vmap_fn: Callable[..., Any] | None = None,
    vmap_wrap_inputs: Callable[..., Any] | None = None,
    vmap_out_dims: int | Sequence[int | None] | None = 0,
    max_vmap_level: int | None = None,
    name: str | None = None,
    mutates_args: str | Sequence[str] = (),
    device_types: str | Sequence[str] | None = None,
    triton_device_types: str | Sequence[str] | None = None,
    schema: str | None = None,
    backward: Callable[..., Any] | None = None,
    setup_context: Callable[..., Any] | None = None,
    jvp: Callable[..., Any] | None = None,
    differentiable: bool = True,
    triton_vmap_fn: Launcher | None = None,
    sample_inputs: SampleInputs | None = None,
    sharding: ShardingSpec | None = None,
) -> VmapOp[P, R]: ...


@overload
def register_triton_op(
    fn: None = None,
    /,
    *,
    fake_fn: Callable[..., Any] | None = None,
    triton_fn: Launcher | None = None,
    vmap_fn: Callable[..., Any] | None = None,
    fake_vmap_fn: Callable[..., Any] | None = None,
    vmap_wrap_inputs: Callable[..., Any] | None = None,
    vmap_out_dims: int | Sequence[int | None] | None = 0,
    max_vmap_level: int | None = None,
    name: str | None = None,
    mutates_args: str | Sequence[str] = (),
    device_types: str | Sequence[str] | None = None,
    triton_device_types: str | Sequence[str] | None = None,
    schema: str | None = None,
    backward: Callable[..., Any] | None = None,
    setup_context: Callable[..., Any] | None = None,
    jvp: Callable[..., Any] | None = None,
    differentiable: bool = True,
    triton_vmap_fn: Launcher | None = None,
    sample_inputs: SampleInputs | None = None,
    sharding: ShardingSpec | None = None,
) -> Callable[[Callable[P, R]], VmapOp[P, R]]: ...


def register_triton_op(
    fn: Callable[P, R] | None = None,
    /,
    *,
    fake_fn: Callable[..., Any] | None = None,
    triton_fn: Launcher | None = None,
    vmap_fn: Callable[..., Any] | None = None,
    fake_vmap_fn: Callable[..., Any] | None = None,
    vmap_wrap_inputs: Callable[..., Any] | None = None,
    vmap_out_dims: int | Sequence[int | None] | None = 0,
    max_vmap_level: int | None = None,
    name: str | None = None,
    mutates_args: str | Sequence[str] = (),
    device_types: str | Sequence[str] | None = None,
    triton_device_types: str | Sequence[str] | None = None,
    schema: str | None = None,
    backward: Callable[..., Any] | None = None,
    setup_context: Callable[..., Any] | None = None,
    jvp: Callable[..., Any] | None = None,
    differentiable: bool = True,
    triton_vmap_fn: Launcher | None = None,
    sample_inputs: SampleInputs | None = None,
    sharding: ShardingSpec | None = None,
) -> VmapOp[P, R] | Callable[[Callable[P, R]], VmapOp[P, R]]:
    """Register an op with a PyTorch fallback and a Triton launcher for chosen device types.

    Everything it shares with :func:`opreg_core.register_vmap_op` means the same
    there; the decorated function is the fallback and serves every device that
    has no Triton kernel, and every device while Triton is unavailable.

    Args:
        triton_fn: the launcher, called with the op's arguments (plain tensors) on
            each Triton device type; it allocates the outputs and launches the kernel.
            A ``"package.module:function"`` string is imported on the first launch,
            which keeps modules with ``@triton.jit`` kernels out of import time.
        triton_device_types: device types that get the launcher: None (default) for
            :func:`~opreg_kernels.triton_device_types` at registration time, a str, or a
            sequence of str. Types this torch build does not know are skipped (see
            :func:`triton_kernel_info`).
        triton_vmap_fn: optional launcher for the batched operator (``vmap_fn``'s
            signature), so that ``vmap(op)`` runs Triton too; needs ``vmap_fn``.
        sharding: how the op runs on DTensor arguments, as in ``register_vmap_op``; on each
            rank the Triton kernel runs on the local shard, under its device's guard.

    Every launch runs with the tensors' device made current; a kernel that fails to
    compile or launch raises :class:`~opreg_kernels.TritonKernelError`.
    """

    def decorator(f: Callable[P, R]) -> VmapOp[P, R]:
        qualname = name if isinstance(name, str) else default_name(f)
        launcher = _check_launcher(qualname, "triton_fn", triton_fn)
        if triton_vmap_fn is not None:
            _check_launcher(qualname, "triton_vmap_fn", triton_vmap_fn)
            if vmap_fn is None:
                raise ValueError(f"opreg: {qualname}: triton_vmap_fn is given but vmap_fn is not")
        devices = _device_type_set(qualname, triton_device_types)
        op = register_vmap_op(
            f,
            fake_fn=fake_fn,
            vmap_fn=vmap_fn,
            fake_vmap_fn=fake_vmap_fn,
            vmap_wrap_inputs=vmap_wrap_inputs,
            vmap_out_dims=vmap_out_dims,
            max_vmap_level=max_vmap_level,
            name=name,
            mutates_args=mutates_args,
            device_types=device_types,
            schema=schema,
            backward=backward,
            setup_context=setup_context,
            jvp=jvp,
            differentiable=differentiable,
            sample_inputs=sample_inputs,
            sharding=sharding,
        )
        info = TritonKernelInfo(op, launcher, triton_vmap_fn, devices)
        for device in sorted(devices):
            info.add_device_type(device)
        with _infos_lock:
            _infos[op.qualname] = info
        return op

    return decorator if fn is None else decorator(fn)
