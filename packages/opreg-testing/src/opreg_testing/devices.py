"""Which devices the checks can run on, and parsing device names from options."""

from __future__ import annotations

from collections.abc import Iterable

import torch

#: The pseudo-device under which Triton kernels run on CPU through Triton's interpreter.
TRITON_CPU = "triton-cpu"


def is_triton_cpu(device: object) -> bool:
    """Whether ``device`` names the pseudo-device :data:`TRITON_CPU` (in any case)."""
    return isinstance(device, str) and device.strip().lower() == TRITON_CPU


def available_devices() -> tuple[str, ...]:
    """``"cpu"``, then ``"cuda"`` when a CUDA device is present."""
    found = ["cpu"]
    if torch.cuda.is_available():
        found.append("cuda")
    return tuple(found)


def cuda_device_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def parse_devices(values: Iterable[str]) -> tuple[str, ...]:
    """Device names from options: each item may list several, comma-separated.

    Accepts what ``torch.device`` accepts (``cpu``, ``cuda``, ``cuda:1``) and ``triton-cpu``;
    ``ValueError`` otherwise. Order is kept, duplicates dropped.
    """
    names: list[str] = []
    for value in values:
        for item in value.split(","):
            name = item.strip().lower()
            if not name:
                continue
            if name != TRITON_CPU:
                try:
                    torch.device(name)
                except RuntimeError:
                    raise ValueError(
                        f"unknown device {item.strip()!r}: use cpu, cuda, cuda:N or {TRITON_CPU}"
                    ) from None
            names.append(name)
    if not names:
        raise ValueError("no device given")
    return tuple(dict.fromkeys(names))


def device_problem(name: str) -> str | None:
    """Why the device ``name`` (a :func:`parse_devices` name) cannot be used here, or None.

    A CUDA device must be present; ``triton-cpu`` needs Triton and opreg-kernels; another
    device type is asked ``torch.<type>.is_available()`` where torch has that.
    """
    if name == TRITON_CPU:
        from .interpreter import kernels_installed, triton_installed

        if not triton_installed():
            return f"device {TRITON_CPU!r} needs Triton, which is not installed"
        if not kernels_installed():
            return (
                f"device {TRITON_CPU!r} needs opreg-kernels, which is not installed "
                "(pip install 'opreg-testing[kernels]')"
            )
        return None
    device = torch.device(name)
    if device.type == "cuda":
        count = cuda_device_count()
        if count == 0:
            return f"device {name!r} is not present: no CUDA device here"
        if (device.index or 0) >= count:
            return f"device {name!r} is not present: {count} CUDA device(s) here"
        return None
    backend = getattr(torch, device.type, None)
    is_available = getattr(backend, "is_available", None)
    if callable(is_available) and not is_available():
        return f"device {name!r} is not present: torch.{device.type}.is_available() is False"
    return None


def torch_device(name: str) -> torch.device:
    """The torch device of a device name (``triton-cpu`` runs on the CPU)."""
    return torch.device("cpu" if name == TRITON_CPU else name)
