"""The object ``register_vmap_op`` returns: an ``OpOverload`` that knows how it was registered."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, ParamSpec, TypeVar

import torch

from ._batching import VmapStats
from ._kernels import DeviceKernels, KernelHandle, add_kernel
from ._private import OpOverload
from ._samples import SampleInputs

P = ParamSpec("P")
R = TypeVar("R")


class Registration(NamedTuple):
    """One kernel opreg put into the dispatcher."""

    operator: str  #: qualified operator name
    dispatch_key: str
    what: str  #: e.g. "fallback", "fake", "vmap rule", "autograd"


class VmapOp(OpOverload[P, R]):
    """A registered opreg operator.

    It *is* an ``OpOverload`` (so ``torch.library.opcheck``, ``torch.compile`` and
    ``torch.export`` treat it as the operator). Each op gets its own subclass whose
    ``__call__`` takes the dispatcher's route itself in one Python frame when only plain tensors
    take part and nothing could route the call differently (``_direct_call``), and goes
    through the dispatcher otherwise. ``overload`` is the same operator as
    ``torch.ops.<namespace>.<name>.default``, whose calls always go through the dispatcher.
    """

    # Set by opreg_core._build.make_op; documented attributes of the public API. Each option
    # of VmapOpOptions (but name, resolved into qualname) is the attribute of its name.
    qualname: str
    namespace: str
    opname: str
    overload: OpOverload[P, R]
    batched_overload: OpOverload[P, Any] | None
    fallback: Callable[P, R]
    fake_fn: Callable[..., Any]
    vmap_fn: Callable[..., Any] | None
    fake_vmap_fn: Callable[..., Any] | None
    vmap_wrap_inputs: Callable[..., Any] | None
    vmap_out_dims: tuple[int | None, ...]
    max_vmap_level: int | None
    mutates_args: tuple[str, ...]
    device_types: tuple[str, ...] | None
    schema: str
    backward: Callable[..., Any] | None
    setup_context: Callable[..., Any] | None
    jvp: Callable[..., Any] | None  #: the forward-mode rule, or None
    differentiable: bool
    sample_inputs: SampleInputs | None
    #: The autocast rule, ``{device type: dtype or "lower_precision"}``, or None.
    autocast: Mapping[str, torch.dtype | str] | None
    sharding: Any  #: the resolved ``ShardingRule`` or None (see ``register_sharding_rule``)
    module: str  #: ``fn.__module__``: where the op was defined (the registry groups by it)
    registrations: tuple[Registration, ...]
    vmap_stats: VmapStats
    #: Data that packages built on opreg-core attach to the op, under a key naming the package
    #: (e.g. ``"opreg_kernels.triton"``). Each registration starts a fresh, empty dict (earlier
    #: handles of a re-registered name see the new one); ``unregister`` and a re-registration
    #: empty it, first calling the ``release()`` method of each value that has one.
    extensions: dict[str, object]
    _kernels: dict[tuple[str, bool], KernelHandle]
    _device_kernels: DeviceKernels  #: what the direct call runs per device type
    _libs: list[Any]

    @property
    def has_backward(self) -> bool:
        return self.backward is not None

    @property
    def has_jvp(self) -> bool:
        """Whether forward-mode AD (``torch.func.jvp``, ``jacfwd``, dual tensors) is defined."""
        return self.jvp is not None

    @property
    def kernel_device_types(self) -> frozenset[str]:
        """Device types for which :meth:`register_kernel` added a kernel to the op itself."""
        return frozenset(dev for (dev, batched) in self._kernels if not batched)

    def register_kernel(
        self, device_type: str, kernel: Callable[..., Any], *, batched: bool = False
    ) -> KernelHandle:
        """Serve ``device_type`` with ``kernel`` instead of the fallback.

        With ``batched=True`` the kernel replaces ``vmap_fn`` for that device (same signature as
        ``vmap_fn``). Registering the same device again replaces the earlier kernel. Raises
        ``ValueError`` if this torch build does not know ``device_type``, or if it names a
        device index (``"cuda:1"``: a kernel serves every device of its type).
        """
        return add_kernel(self, device_type, kernel, batched)

    def __repr__(self) -> str:
        return f"<opreg op {self.qualname}{self.schema}>"

    if TYPE_CHECKING:

        def __call__(self, /, *args: P.args, **kwargs: P.kwargs) -> R: ...
