"""Kernels as opreg registers them (arity-checked, below autograd for a non-differentiable
op), and the per-device kernels of :meth:`VmapOp.register_kernel`.

This module sits below ``_state`` and ``_op`` (whose ``register_kernel`` adds a kernel).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from ._aliasing import first_call_checked
from ._autograd import requires_grad
from ._private import below_autograd
from ._signature import parse_signature


def checked_arity(
    kernel: Callable[..., Any], qualname: str, label: str, num_returns: int
) -> Callable[..., Any]:
    """Guard a kernel of a multi-output op against returning the wrong number of outputs.

    PyTorch accepts a Python kernel's tuple of the wrong length and corrupts the dispatcher's
    stack (a crash later); single-output ops get a clean error from PyTorch and stay unwrapped.
    """
    if num_returns <= 1:
        return kernel

    def guarded(*args: Any, **kwargs: Any) -> Any:
        out = kernel(*args, **kwargs)
        if not isinstance(out, (tuple, list)) or len(out) != num_returns:
            got = f"{len(out)} outputs" if isinstance(out, (tuple, list)) else type(out).__name__
            raise RuntimeError(
                f"opreg: {qualname}: {label} returned {got}, the op declares {num_returns} outputs"
            )
        return out

    return guarded


class Registered(NamedTuple):
    """A kernel as registered with the dispatcher (``kernel``), and what a direct call runs
    where autograd cannot act (``direct``): the same, without a non-differentiable op's
    below-autograd guard (whose checks cost about a tenth of a tiny call)."""

    kernel: Callable[..., Any]
    direct: Callable[..., Any]


def as_registered(
    kernel: Callable[..., Any],
    differentiable: bool,
    qualname: str,
    label: str,
    num_returns: int,
    schema: str,
    fake: Callable[..., Any] | None = None,
) -> Registered:
    """A kernel as registered: arity-checked, its first call checked for outputs that alias
    inputs (``_aliasing``; ``schema``: the op's, without its name), and run below autograd for
    a non-differentiable op (whose ``Autograd`` key is a fallthrough). Call it once per
    dispatch key: each registration checks its own first call (against ``fake``, the op's
    fake, too: ``_fake_check``)."""
    checked = checked_arity(kernel, qualname, label, num_returns)
    first_call = first_call_checked(checked, qualname, label, schema, num_returns, fake)
    if differentiable:
        return Registered(first_call, first_call)
    signature = parse_signature(qualname, schema)
    guarded = below_autograd(
        checked,
        first_call,
        requires_grad,
        lists=signature.list_args,
        keywords=bool(signature.kwarg_only),
    )
    return Registered(guarded, first_call)


#: Device types whose dispatch a direct call takes itself (``_call_path``), and the key that
#: serves each from a fallback registered on it.
_DIRECT_KEYS = {"cpu": "CPU", "cuda": "CUDA"}


class DeviceKernels:
    """Which kernel the dispatcher runs for a plain tensor of each device type that the direct
    call serves (``_call_path``): a ``register_kernel`` kernel, else the fallback where it is
    registered; each a :class:`Registered` (as registered, and as a direct call runs it where
    autograd cannot act). All emptied once the op is unregistered.

    - ``serving``: the live table, device type -> kernel.
    - ``everywhere``: the fallback while it serves every device type (registered on
      ``CompositeExplicitAutograd``, no ``register_kernel`` kernel added), else None.
    - ``shared``: that fallback while every added kernel is for a device type the direct call
      serves (cpu, cuda): it serves a tensor of any other device type. Else None.
    - ``on_cpu``, ``on_cuda``: a ``register_kernel`` kernel serves that device type.
    """

    __slots__ = (
        "_added", "_everywhere", "everywhere", "fallbacks", "on_cpu", "on_cuda", "serving",
        "shared",
    )  # fmt: skip

    #: The device types the direct call serves itself.
    DEVICE_TYPES: tuple[str, ...] = tuple(_DIRECT_KEYS)

    def __init__(self, fallbacks: dict[str, Registered], everywhere: Registered | None) -> None:
        self.fallbacks = fallbacks
        self.serving = dict(fallbacks)
        self._everywhere = everywhere
        self._added: set[str] = set()
        self._refresh()

    def _refresh(self) -> None:
        added = self._added
        self.everywhere: Registered | None = None if added else self._everywhere
        self.shared: Registered | None = self._everywhere if added <= set(_DIRECT_KEYS) else None
        self.on_cpu = "cpu" in added
        self.on_cuda = "cuda" in added

    @staticmethod
    def fallback_devices(dispatch_key: str) -> tuple[str, ...]:
        """The device types a fallback registered on ``dispatch_key`` serves."""
        if dispatch_key == "CompositeExplicitAutograd":
            return tuple(_DIRECT_KEYS)
        return tuple(d for d, key in _DIRECT_KEYS.items() if key == dispatch_key)

    def add(self, device_type: str, kernel: Registered) -> None:
        self._added.add(device_type)
        if device_type in _DIRECT_KEYS:
            self.serving[device_type] = kernel
        self._refresh()

    def remove(self, device_type: str) -> None:
        self._added.discard(device_type)
        fallback = self.fallbacks.get(device_type)
        if fallback is None:
            self.serving.pop(device_type, None)
        else:
            self.serving[device_type] = fallback
        self._refresh()

    def clear(self) -> None:
        self.fallbacks.clear()
        self.serving.clear()
        self._added.clear()
        self._everywhere = None
        self._refresh()


class KernelHandle:
    """A kernel added with :meth:`VmapOp.register_kernel`; :meth:`remove` takes it out again."""

    def __init__(
        self,
        device_type: str,
        batched: bool,
        lib: Any,
        handles: dict[tuple[str, bool], KernelHandle],
        serving: DeviceKernels,
    ) -> None:
        self._handles = handles  # the op's (its ``OpState.handles``)
        self._serving = serving  # the op's ``OpState.device_kernels``
        self.device_type = device_type
        self.batched = batched
        self._lib = lib

    def remove(self) -> None:
        """Unregister the kernel; the fallback (or ``vmap_fn``) serves the device again."""
        if self._lib is not None:
            self._lib.destroy()
            self._lib = None
            self._handles.pop((self.device_type, self.batched), None)
            if not self.batched:
                self._serving.remove(self.device_type)

    @property
    def active(self) -> bool:
        return self._lib is not None
