"""Autocast (AMP) rules of an op: the ``autocast`` option.

PyTorch's autocast lists each ATen op under a cast policy (``ATen/autocast_mode.h``):
``lower_precision_fp`` casts the floating inputs to the region's dtype (``matmul``, ``conv``),
``fp32`` casts them to float32 (``softmax``, norms, losses); ``torch.library.register_autocast``
gives a custom op a fixed dtype per device type (``cast_inputs``). opreg takes the same three
meanings in one option, per device type::

    autocast="lower_precision"      # every device type: the autocast region's dtype
    autocast="float32"              # every device type: float32
    autocast={"cuda": torch.bfloat16, "cpu": "float32"}   # per device type: a dtype or a policy

Under an autocast region enabled for a device type that has a rule, each tensor argument
that is floating point, on that device type and not float64 (also inside lists of tensors) is
cast with a differentiable ``.to`` (autograd returns its gradient in the input's dtype); the op
then runs on the cast arguments with that device type's autocast excluded, exactly as ATen's
wrappers do (``cached_cast``, an ``ExcludeDispatchKeyGuard``). The rule is a kernel on the
device type's ``Autocast<Backend>`` dispatch key of the op and of its batched operators, so it
applies wherever the dispatcher runs the op: eager, vmap at any depth (below the vmap levels,
where ATen's batching rules also meet autocast), ``torch.func``, ``torch.compile``, DTensor.
Outside any autocast region nothing of it runs. (ATen also caches the casts of float32 leaf
weights within a region; opreg casts on each call: the same values.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Literal, TypeAlias

import torch

from ._devices import device_type_name
from ._private import autocast_capable_device_types, autocast_dispatch_key, excluding_dispatch_key

#: A named cast policy: ``"lower_precision"`` casts to the autocast region's dtype
#: (``torch.get_autocast_dtype(device_type)``, ATen's ``lower_precision_fp``), ``"float32"``
#: to float32 (ATen's ``fp32``).
AutocastPolicy: TypeAlias = Literal["lower_precision", "float32"]
#: The ``autocast`` option: a policy for every device type with autocast, or a policy or a
#: floating dtype (``torch.library.register_autocast``'s ``cast_inputs``) per device type.
AutocastRule: TypeAlias = AutocastPolicy | Mapping[str, torch.dtype | AutocastPolicy]
#: A resolved cast target: a dtype, or ``"lower_precision"`` (the region's dtype).
AutocastTarget: TypeAlias = torch.dtype | Literal["lower_precision"]

_POLICIES = ("lower_precision", "float32")


def resolve_autocast(qualname: str, value: object) -> Mapping[str, AutocastTarget] | None:
    """The ``autocast`` option as ``{device type: target}`` (``"float32"`` becomes
    ``torch.float32``), or None without a rule; a clear error naming the op otherwise."""
    if value is None:
        return None
    capable = autocast_capable_device_types()
    if isinstance(value, str):
        target = _target(qualname, "autocast", value)
        return MappingProxyType(dict.fromkeys(capable, target))
    if not isinstance(value, Mapping):
        hint = (
            ' (a dtype needs its device type: {"cuda": ' + str(value) + "})"
            if isinstance(value, torch.dtype)
            else ""
        )
        raise TypeError(
            f"opreg: {qualname}: autocast must be 'lower_precision', 'float32' or a mapping "
            f"of device types to a dtype or one of those, got {value!r}{hint}"
        )
    if not value:
        raise ValueError(f"opreg: {qualname}: autocast is an empty mapping (None: no rule)")
    rules: dict[str, AutocastTarget] = {}
    for device, target in value.items():
        if not isinstance(device, str):
            raise TypeError(
                f"opreg: {qualname}: autocast keys must be device type names (str), got {device!r}"
            )
        name = device_type_name(device)
        if name != device.strip().lower() or autocast_dispatch_key(name) is None:
            raise ValueError(
                f"opreg: {qualname}: autocast: {device!r} is not a device type with autocast "
                f"in this torch build (those are: {', '.join(capable)})"
            )
        if name in rules:
            raise ValueError(f"opreg: {qualname}: autocast names device type {name!r} twice")
        rules[name] = _target(qualname, f"autocast[{device!r}]", target)
    return MappingProxyType(rules)


def _target(qualname: str, label: str, value: object) -> AutocastTarget:
    if isinstance(value, torch.dtype):
        if not value.is_floating_point:
            raise ValueError(
                f"opreg: {qualname}: {label} must be a floating dtype (autocast casts floating "
                f"inputs only), got {value}"
            )
        return value
    if value == "lower_precision":
        return "lower_precision"
    if value == "float32":
        return torch.float32
    raise ValueError(
        f"opreg: {qualname}: {label} must be 'lower_precision', 'float32' or a floating "
        f"torch.dtype, got {value!r}"
    )


def cast_for_autocast(value: Any, device_type: str, dtype: torch.dtype) -> Any:
    """``value`` with every autocast-eligible tensor in it cast to ``dtype``: floating point,
    on ``device_type``, not float64 (ATen's ``is_eligible``); lists and tuples of tensors too.
    Anything else is returned as it is."""
    if isinstance(value, torch.Tensor):
        if (
            value.is_floating_point()
            and value.dtype is not torch.float64
            and value.device.type == device_type
        ):
            return value.to(dtype)
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(cast_for_autocast(v, device_type, dtype) for v in value)
    return value


def make_autocast_kernel(
    entry: Callable[..., Any], device_type: str, target: AutocastTarget
) -> tuple[str, Callable[..., Any]]:
    """(dispatch key, kernel) of one operator's rule for one device type: the kernel casts the
    arguments and calls the operator (``entry``, through the dispatcher) again with the key
    excluded."""
    key = autocast_dispatch_key(device_type)
    assert key is not None  # resolve_autocast admits only device types with a key
    excluded = excluding_dispatch_key(key)
    region_dtype = torch.get_autocast_dtype

    def kernel(*args: Any, **kwargs: Any) -> Any:
        dtype = region_dtype(device_type) if target == "lower_precision" else target
        assert isinstance(dtype, torch.dtype)
        with excluded():
            args = cast_for_autocast(args, device_type, dtype)
            if kwargs:
                kwargs = {k: cast_for_autocast(v, device_type, dtype) for k, v in kwargs.items()}
            return entry(*args, **kwargs)

    return key, kernel
