"""Which devices the checks can run on, and parsing device names from options."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ._triton_cpu import TRITON_CPU, is_triton_cpu
from .interpreter import triton_cpu_problem

__all__ = [
    "TRITON_CPU",
    "available_devices",
    "cuda_device_count",
    "default_devices",
    "device_problem",
    "is_triton_cpu",
    "parse_devices",
    "torch_device",
]


def available_devices() -> tuple[str, ...]:
    """``"cpu"``, then ``"cuda"`` when a CUDA device is present."""
    found = ["cpu"]
    if torch.cuda.is_available():
        found.append("cuda")
    return tuple(found)


def default_devices() -> tuple[str, ...]:
    """The devices checked when none are chosen, by ``opreg check`` and the pytest plugin alike:
    ``"cpu"``, ``"cuda"`` when present, and ``"triton-cpu"`` when Triton kernels can run on
    CPU here (Triton and opreg-kernels import, Triton's interpreter is on).

    Call it after the decision about Triton's interpreter (it imports Triton when installed).
    An op without a Triton kernel is not run again on ``triton-cpu`` when ``cpu`` is checked
    too; a Triton op whose kernel runs on none of these devices is not green (see
    :func:`opreg_testing.interpreter.kernel_not_run_reason`).
    """
    devices = available_devices()
    if triton_cpu_problem() is None:
        devices = (*devices, TRITON_CPU)
    return devices


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

    A CUDA device must be present; ``triton-cpu`` needs Triton, opreg-kernels and Triton's
    interpreter, importable and on (:func:`~opreg_testing.interpreter.triton_cpu_problem`); another
    device type is asked ``torch.<type>.is_available()`` where torch has that.
    """
    if name == TRITON_CPU:
        problem = triton_cpu_problem()
        return None if problem is None else f"device {TRITON_CPU!r} cannot run here: {problem}"
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
