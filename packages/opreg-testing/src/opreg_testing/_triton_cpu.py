"""The name of the pseudo-device ``triton-cpu``: Triton kernels on CPU, through Triton's
interpreter. Below both ``devices`` (which lists and parses devices) and ``interpreter``
(which says whether ``triton-cpu`` can run here), so that neither imports the other."""

from __future__ import annotations

__all__ = ["TRITON_CPU", "is_triton_cpu"]

#: The pseudo-device under which Triton kernels run on CPU through Triton's interpreter.
TRITON_CPU = "triton-cpu"


def is_triton_cpu(device: object) -> bool:
    """Whether ``device`` names the pseudo-device :data:`TRITON_CPU` (in any case)."""
    return isinstance(device, str) and device.strip().lower() == TRITON_CPU
