"""The differentiable outputs of an op and random weightings of them, shared by the autograd
check (:mod:`.autograd`) and its check of backwards that write into their saved inputs
(:mod:`._consumed_inputs`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def is_float(t: torch.Tensor) -> bool:
    """Whether a tensor is floating or complex (differentiable)."""
    return t.dtype.is_floating_point or t.dtype.is_complex


def floating_outputs(out: Any) -> list[torch.Tensor]:
    """The floating (or complex) tensors of an op's output, lists and tuples flattened."""
    items = out if isinstance(out, (tuple, list)) else (out,)
    found: list[torch.Tensor] = []
    for item in items:
        if isinstance(item, torch.Tensor) and is_float(item):
            found.append(item)
        elif isinstance(item, (tuple, list)):
            found.extend(floating_outputs(item))
    return found


def weighted_sum(outs: Sequence[torch.Tensor], weights: Sequence[torch.Tensor]) -> torch.Tensor:
    """``sum(w * out)`` (real part): a scalar that every output element reaches."""
    return torch.stack([(o * w).real.sum() for o, w in zip(outs, weights, strict=True)]).sum()


def random_like(t: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Standard normal values of ``t``'s shape, dtype and device, from ``g``."""
    return torch.randn(t.shape, generator=g, dtype=t.dtype).to(t.device)
