"""The object ``register_vmap_op`` returns: an ``OpOverload`` that knows how it was registered."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import torch

from ._batching import VmapStats
from ._declaration import option_metadata
from ._devices import device_type_name, dispatch_key_for
from ._kernels import KernelHandle, as_registered
from ._naming import BATCHED_SUFFIX
from ._options import VmapOpOptions, check_callable
from ._private import Library, OpOverload, new_op_object
from ._registry_lock import registry_lock
from ._samples import SampleInputs
from ._sharding import ShardingRule
from ._state import OpState, Registration

P = ParamSpec("P")
R = TypeVar("R")


def _with_option_attributes(cls: type[VmapOp[Any, Any]]) -> type[VmapOp[Any, Any]]:
    """Give the op an attribute per option (but ``name``: ``OpOverload.name()``, and those the
    op shows resolved, such as ``sharding``), read from its resolved options: made from the
    declaration, so that a new option needs nothing here. (Properties, not ``__getattr__``,
    which would slow every attribute read of the op, its call included.)"""
    for label in option_metadata(VmapOpOptions):
        if label != "name" and label not in vars(cls):
            getter = partial(_option, label=label)
            setattr(
                cls, label, property(getter, doc=f"The ``{label}`` option (see VmapOpOptions).")
            )
    return cls


def _option(op: VmapOp[Any, Any], label: str) -> Any:
    return op._state.spec.options[label]  # type: ignore[literal-required]


@_with_option_attributes
class VmapOp(OpOverload[P, R]):
    """A registered opreg operator.

    It *is* an ``OpOverload`` (so ``torch.library.opcheck``, ``torch.compile`` and
    ``torch.export`` treat it as the operator). Everything a registration built lives in one
    :class:`~opreg_core._state.OpState` that the op holds (``_state``): its call runs
    ``_state.call``, which takes the dispatcher's route itself in one Python frame when only
    plain tensors take part and nothing could route the call differently (``_call_path``),
    and is the operator's entry point otherwise. Registering the name again swaps that one
    reference, in this op and in every earlier handle of the name. ``overload`` is the same
    operator as ``torch.ops.<namespace>.<name>.default``, whose calls always go through the
    dispatcher.

    Each option of :class:`VmapOpOptions` (but ``name``, resolved into ``qualname``) is an
    attribute of its name, read from :attr:`options`; the documented ones are typed below.
    """

    _state: OpState

    if TYPE_CHECKING:
        # Read from ``_state`` (below, for the interpreter: properties fetching in C).
        qualname: str
        namespace: str
        opname: str
        overload: OpOverload[P, R]
        batched_overload: OpOverload[P, Any] | None
        fallback: Callable[P, R]
        #: ``fn.__module__`` when the op was registered: where it was defined (the registry
        #: groups by it).
        module: str
        registrations: tuple[Registration, ...]
        vmap_stats: VmapStats
        #: The resolved ``ShardingRule`` or None (see ``register_sharding_rule``).
        sharding: ShardingRule | None
        #: Data that packages built on opreg-core attach to the op, under a key naming the
        #: package (e.g. ``"opreg_kernels.triton"``). Each registration starts a fresh, empty
        #: dict (earlier handles of a re-registered name see the new one); ``unregister`` and
        #: a re-registration empty it, first calling the ``release()`` method of each value
        #: that has one.
        extensions: dict[str, object]
        #: Every option (but ``name``), checked and normalised (see :class:`VmapOpOptions`).
        options: VmapOpOptions

        # The options, read from ``options`` (properties made from the declaration, below);
        # the documented ones:
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

        def __call__(self, /, *args: P.args, **kwargs: P.kwargs) -> R: ...

    else:
        # The call: ``_state.call``, fetched in C (a property over ``attrgetter``), so the op
        # adds no Python frame of its own, and a re-registration needs to swap only ``_state``.
        __call__ = property(attrgetter("_state.call"))
        qualname = property(attrgetter("_state.spec.qualname"))
        namespace = property(attrgetter("_state.spec.namespace"))
        opname = property(attrgetter("_state.spec.opname"))
        overload = property(attrgetter("_state.overload"))
        batched_overload = property(attrgetter("_state.batched_overload"))
        fallback = property(attrgetter("_state.spec.fn"))
        module = property(attrgetter("_state.spec.module"))
        registrations = property(attrgetter("_state.registrations"))
        vmap_stats = property(attrgetter("_state.vmap_stats"))
        sharding = property(attrgetter("_state.sharding"))
        extensions = property(attrgetter("_state.extensions"))
        options = property(attrgetter("_state.spec.options"))

    @classmethod
    def _create(cls, state: OpState) -> VmapOp[Any, Any]:
        """The op object of a registration: the only place that writes an op's ``__dict__``
        (it takes the operator's state, then ``state``; see :meth:`_adopt`)."""
        op: VmapOp[Any, Any] = new_op_object(cls, state.overload)
        cls._adopt(op, state)
        return op

    def _adopt(self, state: OpState) -> None:
        """Become the op of ``state``: its operator (the schema, handle and caches torch reads
        from an overload) and its runtime state. A re-registration calls it on the earlier
        handles of the name."""
        vars(self).update(vars(state.overload))
        fn = state.spec.fn
        vars(self).update(_state=state, __doc__=getattr(fn, "__doc__", None), __wrapped__=fn)

    def _replaced_by(self, other: VmapOp[Any, Any]) -> None:
        """Another definition took this op's name: calling this handle raises, naming both."""
        self._adopt(self._state.with_call(_replaced(self, other)))

    @property
    def has_backward(self) -> bool:
        return self._state.spec.options["backward"] is not None

    @property
    def has_jvp(self) -> bool:
        """Whether forward-mode AD (``torch.func.jvp``, ``jacfwd``, dual tensors) is defined."""
        return self._state.spec.options["jvp"] is not None

    @property
    def kernel_device_types(self) -> frozenset[str]:
        """Device types for which :meth:`register_kernel` added a kernel to the op itself."""
        return frozenset(dev for (dev, batched) in self._state.handles if not batched)

    def register_kernel(
        self, device_type: str, kernel: Callable[..., Any], *, batched: bool = False
    ) -> KernelHandle:
        """Serve ``device_type`` with ``kernel`` instead of the fallback.

        With ``batched=True`` the kernel replaces ``vmap_fn`` for that device (same signature as
        ``vmap_fn``). Registering the same device again replaces the earlier kernel. Raises
        ``ValueError`` if this torch build does not know ``device_type``, or if it names a
        device index (``"cuda:1"``: a kernel serves every device of its type).
        """
        return _add_kernel(self._state, device_type, kernel, batched)

    def __repr__(self) -> str:
        return f"<opreg op {self.qualname}{self.schema}>"


def definition(fn: object) -> str:
    """Where ``fn`` was defined: ``module:qualname``, and ``(file:line)`` where known."""
    module = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    code = getattr(fn, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"{module}:{name}{where}"


def _replaced(old: VmapOp[Any, Any], new: VmapOp[Any, Any]) -> Callable[..., Any]:
    """The call of a handle whose name another definition took over: a clear error rather
    than the other definition's values."""
    message = (
        f"opreg: {old.qualname}: this handle's op ({definition(old.fallback)}) was replaced by "
        f"{definition(new.fallback)}, which registered the same name: call the op that "
        f"registration returned (opreg_core.get_op({old.qualname!r})), or give one of them "
        "another name="
    )

    def replaced(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(message)

    return replaced


def _add_kernel(
    state: OpState, device_type: str, kernel: Callable[..., Any], batched: bool
) -> KernelHandle:
    """Implementation of :meth:`VmapOp.register_kernel` (``state``: the op's)."""
    spec = state.spec
    qualname = spec.qualname
    check_callable(qualname, "kernel", kernel, required=True)
    try:
        key = dispatch_key_for(device_type)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"opreg: {qualname}: register_kernel: {exc}") from exc
    if batched and state.batched_overload is None:
        raise ValueError(
            f"opreg: {qualname}: register_kernel(batched=True) needs an op registered with vmap_fn"
        )
    device = device_type_name(device_type)
    with registry_lock():
        old = state.handles.get((device, batched))
        if old is not None:
            old.remove()
        lib = Library(spec.namespace)
        name = spec.opname + (BATCHED_SUFFIX if batched else "")
        label = f"the {device} kernel" + (" (batched)" if batched else "")
        fake = None if batched else spec.options["fake_fn"]
        wrapped = as_registered(
            kernel,
            spec.options["differentiable"],
            qualname,
            label,
            len(spec.out_dims),
            spec.signature.schema,
            fake,
        )
        lib.impl(name, wrapped.kernel, key, allow_override=True)
        handle = KernelHandle(device, batched, lib, state.handles, state.device_kernels)
        state.handles[(device, batched)] = handle
        if not batched:
            state.device_kernels.add(device, wrapped)
    return handle
