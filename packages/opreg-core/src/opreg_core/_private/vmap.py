"""vmap: opreg's batching kernels, one vmap level at a time, and that level's randomness."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch._C._functorch as _functorch

#: Dotted names of the internals used here.
INTERNALS: tuple[str, ...] = (
    "torch._C._functorch.tls_set_vmap_excluded",
    "torch._C._functorch._add_batch_dim",
    "torch._C._functorch._unwrap_batched",
    "torch._C._functorch.maybe_current_level",
    "torch._C._functorch.peek_interpreter_stack",
    "torch._C._functorch.CVmapInterpreterPtr",
    "torch._C._functorch.RandomnessType",
    "torch._C._functorch.CVmapInterpreterPtr.randomness",
)


# Why: opreg's batching rules are kernels on ``FuncTorchBatched`` that unwrap and re-wrap the
# level's batched tensors and send the batched call one level down; ``torch.library.register_vmap``
# does the same through these functions, but with one Python rule per level (opreg folds every
# level into one ``vmap_fn`` call) and without ``max_vmap_level``.
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: a ``torch.library`` batching-rule API for nested levels.

_tls_set_vmap_excluded: Callable[[bool], None] = _functorch.tls_set_vmap_excluded  # type: ignore[attr-defined]
add_batch_dim = _functorch._add_batch_dim
unwrap_batched = _functorch._unwrap_batched
peek_interpreter_stack = _functorch.peek_interpreter_stack


def current_vmap_level() -> int:
    """Level of the innermost active functorch transform (a vmap, inside a batching kernel)."""
    level = _functorch.maybe_current_level()
    if level is None:
        raise RuntimeError("opreg: a batching rule ran outside of torch.vmap")
    return level


def call_one_level_down(fn: Callable[..., Any], args: Any, kwargs: dict[str, Any]) -> Any:
    """Call ``fn`` one vmap level down: with ``FuncTorchBatched`` excluded, functorch's
    dynamic-layer keys pop the current level (the lowering ``torch.library.register_vmap``
    uses, through a cheaper TLS switch than a guard object)."""
    _tls_set_vmap_excluded(True)
    try:
        return fn(*args, **kwargs)
    finally:
        _tls_set_vmap_excluded(False)


# Why: ``vmap_wrap_inputs`` is told the ``randomness`` of the vmap level it handles, which
# only functorch's interpreter of that level (top of its stack, a ``CVmapInterpreterPtr``)
# holds, as a ``RandomnessType``.
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: the ``info.randomness`` that ``torch.library.register_vmap`` passes its
# rule (opreg's batching kernels are no such rules: see the vmap section above).
_RANDOMNESS_NAMES = {
    _functorch.RandomnessType.Error: "error",
    _functorch.RandomnessType.Same: "same",
    _functorch.RandomnessType.Different: "different",
}


def vmap_randomness() -> str:
    """``randomness`` (``"error"``, ``"same"`` or ``"different"``) of the vmap level being
    processed (inside a batching kernel)."""
    top = _functorch.CVmapInterpreterPtr(_functorch.peek_interpreter_stack())
    return _RANDOMNESS_NAMES[top.randomness()]
