"""Which tensors are plain dense tensors of a device type the call path serves itself: their
dispatch key sets, learnt once from a fresh tensor of the same device."""

from __future__ import annotations

import torch

from .._kernels import DeviceKernels
from .._private import dispatch_keys_raw

#: Dispatch key sets of plain dense tensors (their ``raw_repr``) -> device type, and of every
#: other tensor seen -> "" (not plain).
PLAIN_KEYS: dict[int, str] = {}


def plain_device_type(tensor: torch.Tensor, raw: int) -> str:
    """The device type of a plain dense tensor whose key set is ``raw`` ("" if not plain)."""
    device = tensor.device
    found = ""
    if device.type in DeviceKernels.DEVICE_TYPES:
        with torch.inference_mode(False):  # a normal tensor's keys, even in inference mode
            fresh = torch.empty(0, device=device)
        if dispatch_keys_raw(fresh) == raw:
            found = device.type
    PLAIN_KEYS[raw] = found
    return found
