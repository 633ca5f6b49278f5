"""``opreg::fused_add`` in PyTorch: the fallback, and the reference the Triton kernel matches."""

from __future__ import annotations

import torch

from .._arguments import check_same_layout

__all__ = ["NAME", "add"]

#: How the op's errors name it.
NAME = "opreg: opreg::fused_add"


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``x + y`` as a new contiguous tensor, after the op's argument checks."""
    check_same_layout(NAME, x, y)
    return torch.add(x, y).contiguous()
