"""Models calling opreg ops, for the AOTInductor tests, and the ops a user would write.

Importing this module registers the user's ops (namespace ``opreg_aoti``; the plain ones come
from ``aoti_core_ops``, which needs opreg-core alone); it imports no
Triton (the launchers are named by string, from ``visible_kernels``). The AOTInductor tests
export and package the models here, then run the packages in fresh processes: one that imports
this module (opaque ops are called by name and need their registration) and, for packages whose
ops are all compiler-visible, one that never imports opreg.
"""

from __future__ import annotations

import torch
from aoti_core_ops import NAMESPACE, CoreModel, like, soft_clip

from opreg_kernels import fused_add, register_triton_op

_LAUNCHER = "visible_kernels:launch"

__all__ = ["NAMESPACE", "CoreModel", "OpaqueModel", "VisibleModel", "soft_clip"]


@register_triton_op(name=f"{NAMESPACE}::double_opaque", fake_fn=like, triton_fn=_LAUNCHER)
def double_opaque(x: torch.Tensor) -> torch.Tensor:
    """A user's Triton op, opaque to the compiler: ``2 * x``."""
    return (x * 2).contiguous()


@register_triton_op(
    name=f"{NAMESPACE}::double_visible", fake_fn=like, triton_fn=_LAUNCHER, compiler_visible=True
)
def double_visible(x: torch.Tensor) -> torch.Tensor:
    """The same op, compiler-visible: AOTInductor compiles its kernel into the package."""
    return (x * 2).contiguous()


class OpaqueModel(torch.nn.Module):
    """Opaque opreg ops (a plain op, a user's Triton op) and the shipped fused_add, between
    pointwise ops. On CPU every op is opaque (fused_add too)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = soft_clip(x * 2 + 1)
        h = double_opaque(torch.relu(h))
        return torch.sigmoid(fused_add(h, y)) * 3


class VisibleModel(torch.nn.Module):
    """Only compiler-visible Triton ops (the shipped fused_add, a user's op) between pointwise
    ops: on CUDA its AOTInductor package holds every kernel and needs no opreg to run."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = double_visible(torch.relu(x * 2 + 1))
        return torch.sigmoid(fused_add(h, y)) * 3
