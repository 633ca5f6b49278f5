"""Argument checks shared by the shipped ops' fallbacks, fakes and launchers.

Each backend of an op calls the same check, so bad input raises the same
TypeError/ValueError (naming the op) on every device and under torch.compile.
"""

from __future__ import annotations

import torch

__all__ = ["MAX_COUNTER", "check_philox_args", "check_same_layout"]

#: Philox counters are 64-bit jump-ahead offsets; the schema carries them as int64.
MAX_COUNTER = 2**63 - 1

_UNSUPPORTED_ADD_DTYPES = (torch.bool, torch.complex32, torch.complex64, torch.complex128)


def check_same_layout(op: str, x: torch.Tensor, y: torch.Tensor) -> None:
    """Require two tensors of one shape, dtype and device (no broadcasting, no promotion)."""
    if x.dtype != y.dtype:
        raise TypeError(f"{op}: x and y must have the same dtype, got {x.dtype} and {y.dtype}")
    if x.dtype in _UNSUPPORTED_ADD_DTYPES:
        raise TypeError(
            f"{op}: dtype {x.dtype} is not supported (use a real floating or integer dtype)"
        )
    if x.shape != y.shape:
        raise ValueError(
            f"{op}: x and y must have the same shape, got {tuple(x.shape)} and {tuple(y.shape)}"
        )
    if x.device != y.device:
        raise ValueError(f"{op}: x and y must be on the same device, got {x.device} and {y.device}")


def check_philox_args(
    op: str, seeds: torch.Tensor, n: int, counter: int, seed_dims: int = 1
) -> None:
    """Require int64 ``seeds`` with ``seed_dims`` dims, ``n >= 0`` and ``0 <= counter < 2**63``."""
    if seeds.dtype != torch.int64:
        raise TypeError(f"{op}: seeds must be an int64 tensor, got {seeds.dtype}")
    if seeds.dim() != seed_dims:
        sample_shape = tuple(seeds.shape[seed_dims - 1 :])  # the shape one (vmapped) call sees
        raise ValueError(
            f"{op}: seeds must be a 1-D tensor (one seed per row), got shape {sample_shape}"
        )
    if n < 0:
        raise ValueError(f"{op}: n must be >= 0, got {n}")
    if not 0 <= counter <= MAX_COUNTER:
        raise ValueError(f"{op}: counter must be in [0, 2**63), got {counter}")
