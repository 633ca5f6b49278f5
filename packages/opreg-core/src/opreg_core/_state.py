"""The one runtime object of a registered op: everything one registration holds.

``_build.build`` constructs it, once per registration; the op object (``VmapOp``) holds a
reference to it and reads everything through it. The call path (``_call_path``),
``register_kernel``, ``unregister`` and a re-registration read it or swap that one
reference: no module writes to the op object itself. Packages built on opreg-core attach
their parts through :attr:`extensions` (``VmapOp.extensions``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from ._batching import VmapStats
from ._options import OpSpec

if TYPE_CHECKING:
    from ._autograd import DirectRecord
    from ._kernels import DeviceKernels, KernelHandle
    from ._private import Library, OpOverload
    from ._sharding import ShardingRule


class Registration(NamedTuple):
    """One kernel opreg put into the dispatcher."""

    operator: str  #: qualified operator name
    dispatch_key: str
    what: str  #: e.g. "fallback", "fake", "vmap rule", "autograd"


class OpState:
    """One registration of an op: its resolved options, its operators, its kernels per device
    type, how its calls are recorded and routed, and what it registered.

    ``spec.options`` holds every option (typed by ``VmapOpOptions``); the fields below are what
    the registration built from them. (A plain class with ``__slots__``: a dataclass would add
    a third of a millisecond to ``import opreg_core``.)
    """

    __slots__ = (
        "batched_overload", "call", "device_kernels", "extensions", "handles", "libs",
        "overload", "record", "registrations", "sharding", "spec", "vmap_stats",
    )  # fmt: skip

    def __init__(
        self,
        *,
        spec: OpSpec,
        overload: OpOverload[..., Any],
        batched_overload: OpOverload[..., Any] | None,
        call: Callable[..., Any],
        device_kernels: DeviceKernels,
        handles: dict[tuple[str, bool], KernelHandle],
        record: DirectRecord | None,
        vmap_stats: VmapStats,
        registrations: tuple[Registration, ...],
        libs: list[Library],
    ) -> None:
        self.spec = spec
        self.overload = overload  #: the operator (``torch.ops.<ns>.<name>.default``)
        self.batched_overload = batched_overload  #: the batched op (with ``vmap_fn``)
        #: What the op's call runs (``_call_path``): the direct call, or the entry point.
        self.call = call
        #: The kernel serving a plain tensor of each device type the call path serves itself.
        self.device_kernels = device_kernels
        #: The ``register_kernel`` kernels by (device type, batched); the batching rules read
        #: it too (a device kernel turns their short path off).
        self.handles = handles
        self.record = record  #: how the call path records a call (None: not differentiable)
        self.vmap_stats = vmap_stats
        self.registrations = registrations  #: every kernel put into the dispatcher
        self.libs = libs  #: the ``torch.library`` fragments to destroy on retirement
        self.sharding: ShardingRule | None = None  #: set by ``register_sharding_rule``
        #: Data packages built on opreg-core attach, under a key naming the package.
        self.extensions: dict[str, object] = {}

    def with_call(self, call: Callable[..., Any]) -> OpState:
        """The same registration with another call (a handle whose name was taken over)."""
        other = copy.copy(self)
        other.call = call
        return other
