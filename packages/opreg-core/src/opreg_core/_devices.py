"""Device types: the one normalisation of a device (type) name, and its dispatch key."""

from __future__ import annotations

import torch

from ._private import dispatch_key_for_device


def device_type_name(device: str | torch.device) -> str:
    """The device type of ``device``, normalised: ``" CUDA:1 "`` -> ``"cuda"``,
    ``torch.device("cuda", 0)`` -> ``"cuda"``.

    Strings are stripped and lower-cased and lose any ``:index``; this is the one spelling of a
    device type that opreg and the packages built on it compare and store. Raises ``TypeError``
    naming the type for anything but a string or a ``torch.device``.
    """
    if isinstance(device, torch.device):
        return device.type
    if not isinstance(device, str):
        raise TypeError(
            f"opreg: a device must be a string or a torch.device, got {type(device).__name__}"
        )
    return device.strip().lower().partition(":")[0]


def dispatch_key_for(device_type: str) -> str:
    """The backend dispatch key of a device type (``"cuda"`` -> ``"CUDA"``); ValueError if
    this torch build does not know it, or if it carries a device index (a kernel serves every
    device of its type)."""
    if not isinstance(device_type, str):
        raise TypeError(f"device type must be a string, got {type(device_type).__name__}")
    name = device_type_name(device_type)
    if name != device_type.strip().lower():
        raise ValueError(
            f"device type {device_type!r} must not have a device index: a kernel serves every "
            f"device of its type ({name!r})"
        )
    try:
        return dispatch_key_for_device(name)
    except RuntimeError as exc:
        raise ValueError(f"device type {device_type!r} is not known to this torch build") from exc
