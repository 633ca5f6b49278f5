"""Autocast: an op's autocast rule, a kernel on its device type's ``Autocast<Backend>`` key."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import torch

# Why: an op's ``autocast`` rule is a kernel on the device type's ``Autocast<Backend>`` key that
# casts the inputs and calls the op again with that one key excluded, as ATen's autocast
# wrappers (``ExcludeDispatchKeyGuard``) and ``torch.library.register_autocast`` do; the key
# exists only for some device types; and the direct call must send a call of such an op to the
# dispatcher while any autocast region is active (one C call, no Python frame).
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: ``torch.library.register_autocast`` with the autocast dtype as its cast
# target (it takes a fixed dtype per device type), a public "is any autocast enabled" query.

#: Dotted names of the internals used here.
INTERNALS: tuple[str, ...] = (
    "torch._C._is_any_autocast_enabled",
    "torch._C._ExcludeDispatchKeyGuard",
    "torch._C._get_privateuse1_backend_name",
)


#: Whether an autocast region is enabled for some device type.
any_autocast_enabled: Callable[[], bool] = torch._C._is_any_autocast_enabled


def autocast_dispatch_key(device_type: str) -> str | None:
    """The autocast dispatch key of a device type (``"cpu"`` -> ``"AutocastCPU"``), or None
    where this torch build has none for it."""
    try:
        key = "Autocast" + str(torch._C._dispatch_key_for_device(device_type))
    except RuntimeError:
        return None
    return key if key in torch._C.DispatchKey.__members__ else None


def autocast_capable_device_types() -> tuple[str, ...]:
    """The device types that have an autocast dispatch key in this torch build."""
    names = ("cpu", "cuda", "xpu", "mps", "hpu", "ipu", torch._C._get_privateuse1_backend_name())
    return tuple(name for name in names if autocast_dispatch_key(name) is not None)


def excluding_dispatch_key(key: str) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """A maker of guards under which the dispatcher skips ``key`` (an autocast key: no second
    cast); the key set is built once, here."""
    keys = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))
    return functools.partial(torch._C._ExcludeDispatchKeyGuard, keys)
