"""A user's ops and the functions exported with them, for the torch.export round-trip tests
(``tests/kernels/test_export.py``).

Importing this module registers the ops (namespace ``opreg_export``), as a user's package
would; it imports no Triton (the Triton launchers import ``visible_kernels`` on their first
launch). Under Triton's interpreter the Triton ops also serve CPU tensors with their Triton
kernels, so the CPU round trip runs the kernels, not only the fallbacks. ``CALLS`` counts the
Triton launches and the ``vmap_fn`` calls in this process, so a test can tell that the loaded
program ran them.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable

import torch

from opreg_core import register_vmap_op
from opreg_kernels import register_triton_op, triton_kernel_info

NAMESPACE = "opreg_export"

#: Calls in this process: "centered_vmap" (the vmap_fn), "double_opaque", "double_visible"
#: (the Triton launchers).
CALLS: Counter[str] = Counter()


def _like(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _centered_batched(x: torch.Tensor) -> torch.Tensor:
    CALLS["centered_vmap"] += 1
    return x - x.mean(dim=tuple(range(1, x.dim())), keepdim=True)


@register_vmap_op(
    name=f"{NAMESPACE}::centered", fake_fn=_like, vmap_fn=_centered_batched, fake_vmap_fn=_like
)
def centered(x: torch.Tensor) -> torch.Tensor:
    """A plain op with a batching rule: ``x - x.mean()``."""
    return x - x.mean()


def _launcher(key: str) -> Callable[[torch.Tensor], torch.Tensor]:
    def launch(x: torch.Tensor) -> torch.Tensor:
        import visible_kernels  # imports Triton

        CALLS[key] += 1
        return visible_kernels.launch(x)

    return launch


def _double(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).contiguous()


double_opaque = register_triton_op(
    _double, name=f"{NAMESPACE}::double_opaque", fake_fn=_like, triton_fn=_launcher("double_opaque")
)
double_visible = register_triton_op(
    _double,
    name=f"{NAMESPACE}::double_visible",
    fake_fn=_like,
    triton_fn=_launcher("double_visible"),
    compiler_visible=True,
)


@register_vmap_op(name=f"{NAMESPACE}::quantize", fake_fn=_like, differentiable=False)
def quantize(x: torch.Tensor) -> torch.Tensor:
    """A non-differentiable op: ``x`` rounded to quarters."""
    return torch.round(x * 4) / 4


if os.environ.get("TRITON_INTERPRET") == "1":  # the CPU round trip runs the Triton kernels too
    for _op in (double_opaque, double_visible):
        triton_kernel_info(_op).add_device_type("cpu")


class VmapModel(torch.nn.Module):
    """vmap inside the exported function (the op's batching rule, at two depths)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        once = torch.vmap(centered)(x)
        twice = torch.vmap(torch.vmap(centered))(x[None].expand(2, *x.shape))
        return once * 2 + twice.sum(0)


class OpaqueModel(torch.nn.Module):
    """A Triton op opaque to the compiler, between pointwise ops."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(double_opaque(x * 3 + 1)) * 2


class VisibleModel(torch.nn.Module):
    """A compiler-visible Triton op, between pointwise ops."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(double_visible(x * 3 + 1)) * 2


class NondiffModel(torch.nn.Module):
    """A ``differentiable=False`` op next to a differentiable path."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return quantize(x) + torch.tanh(x)


#: The exported programs, by file stem: the model, the ops its program must call, and whether
#: the program is saved after ``run_decompositions()`` (what AOTInductor and most deployment
#: flows run; vmap is then traced away, leaving the op's batched operator in the graph).
MODELS: dict[str, tuple[type[torch.nn.Module], tuple[str, ...], bool]] = {
    "vmap": (VmapModel, (f"{NAMESPACE}.centered",), False),
    "vmap_decomposed": (VmapModel, (f"{NAMESPACE}.centered__opreg_batched",), True),
    "triton_opaque": (OpaqueModel, (f"{NAMESPACE}.double_opaque",), False),
    "triton_visible": (VisibleModel, (f"{NAMESPACE}.double_visible",), False),
    "nondiff": (NondiffModel, (f"{NAMESPACE}.quantize",), False),
}
