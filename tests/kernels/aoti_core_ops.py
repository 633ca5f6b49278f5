"""A user's ops registered with opreg-core alone (no opreg-kernels, no Triton), and a model
calling them, for the AOTInductor tests: their fresh process can import this module with every
other opreg package made unimportable, as where only opreg-core is installed.

Importing it registers ``opreg_aoti::soft_clip`` and ``opreg_aoti::shifted_square``.
"""

from __future__ import annotations

import torch

from opreg_core import register_vmap_op

NAMESPACE = "opreg_aoti"


def like(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@register_vmap_op(name=f"{NAMESPACE}::soft_clip", fake_fn=like)
def soft_clip(x: torch.Tensor) -> torch.Tensor:
    """A plain opreg op (no Triton): ``3 * tanh(x / 3)``."""
    return torch.tanh(x / 3) * 3


@register_vmap_op(name=f"{NAMESPACE}::shifted_square", fake_fn=lambda x, y: like(x))
def shifted_square(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """A second plain op, of two tensors: ``(x - y) ** 2``."""
    return (x - y) ** 2


class CoreModel(torch.nn.Module):
    """Only ops of opreg-core between pointwise ops: opaque to AOTInductor on every device."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = soft_clip(x * 2 + 1)
        return torch.sigmoid(shifted_square(torch.relu(h), y)) * 3
