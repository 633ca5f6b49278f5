"""The dispatch state below functorch levels, for code that opreg runs there itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch._C._functorch as _functorch

# Why: opreg runs some code below functorch levels itself, where functorch would run an
# operation it sends to the next level: a jvp rule one level down (``forward_ad``) and
# ``vmap_fn`` below every vmap level (``vmap_short_paths``). That code gets the dispatch state
# functorch gives the next level: the levels are popped and pushed back
# (``pop_dynamic_layer_stack``/``push_dynamic_layer_stack``), and the thread-local key sets
# (read with ``_dispatch_tls_local_include_set``/``_exclude_set``, built from ``DispatchKey``
# names) are forced with ``_ForceDispatchKeyGuard``.
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: those of its users' sections (a ``torch.autograd.Function`` jvp contract
# that composes with nested ``torch.func`` levels; a ``torch.library`` batching-rule API with a
# "call below every level" helper).

#: Dotted names of the internals used here.
INTERNALS: tuple[str, ...] = (
    "torch._C._ForceDispatchKeyGuard",
    "torch._C._dispatch_tls_local_include_set",
    "torch._C._dispatch_tls_local_exclude_set",
    "torch._C.DispatchKeySet",
    "torch._C.DispatchKey",
    "torch._C._functorch.pop_dynamic_layer_stack",
    "torch._C._functorch.push_dynamic_layer_stack",
)

pop_layer = _functorch.pop_dynamic_layer_stack
push_layer = _functorch.push_dynamic_layer_stack
ForceDispatchKeyGuard = torch._C._ForceDispatchKeyGuard
tls_include: Callable[[], Any] = torch._C._dispatch_tls_local_include_set
tls_exclude: Callable[[], Any] = torch._C._dispatch_tls_local_exclude_set


def keys(*names: str) -> Any:
    """The dispatch key set of the keys named ``names``."""
    result = torch._C.DispatchKeySet(torch._C.DispatchKey.Undefined)
    for name in names:
        result = result | torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, name))
    return result


AUTOCAST_KEYS = keys(*(k for k in torch._C.DispatchKey.__members__ if k.startswith("Autocast")))
FRONT_BACK_KEYS = keys("FuncTorchDynamicLayerFrontMode", "FuncTorchDynamicLayerBackMode")
DEFAULT_INCLUDED_KEYS = keys("BackendSelect", "ADInplaceOrView")
