"""The one runtime object of a registered op: everything one registration holds.

``_build.build`` constructs it, once per registration; the op object (``VmapOp``) holds a
reference to it and reads everything through it. The call path (``_call_path``),
``register_kernel``, ``unregister`` and a re-registration read it or swap that one
reference: no module writes to the op object itself. Packages built on opreg-core attach
their parts through :attr:`extensions` (``VmapOp.extensions``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
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


@dataclass(eq=False, slots=True)
class OpState:
    """One registration of an op: its resolved options, its operators, its kernels per device
    type, how its calls are recorded and routed, and what it registered.

    ``spec.options`` holds every option (typed by ``VmapOpOptions``); the fields below are what
    the registration built from them.
    """

    spec: OpSpec
    overload: OpOverload[..., Any]  #: the operator (``torch.ops.<ns>.<name>.default``)
    batched_overload: OpOverload[..., Any] | None  #: the batched op (with ``vmap_fn``)
    #: What the op's call runs (``_call_path``): the direct call, or the operator's entry point.
    call: Callable[..., Any]
    #: The kernel serving a plain tensor of each device type the call path serves itself.
    device_kernels: DeviceKernels
    #: The ``register_kernel`` kernels by (device type, batched); the batching rules read it
    #: too (a device kernel turns their short path off).
    handles: dict[tuple[str, bool], KernelHandle]
    record: DirectRecord | None  #: how the call path records a call (None: not differentiable)
    vmap_stats: VmapStats
    registrations: tuple[Registration, ...]  #: every kernel put into the dispatcher
    libs: list[Library]  #: the ``torch.library`` fragments to destroy on retirement
    sharding: ShardingRule | None = None  #: set by ``register_sharding_rule``
    #: Data packages built on opreg-core attach, under a key naming the package.
    extensions: dict[str, object] = field(default_factory=dict)
