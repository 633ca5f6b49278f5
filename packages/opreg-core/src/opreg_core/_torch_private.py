"""Typed access to the PyTorch internals opreg relies on, kept in one place.

These are private APIs of ``torch._C``, ``torch._functorch`` and ``torch.library``; a torch
upgrade that moves one of them breaks only this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import torch._C._functorch as _functorch
import torch.autograd.forward_ad as _forward_ad
from torch._functorch import autograd_function as _autograd_function
from torch.autograd.function import _SingleLevelFunction

SingleLevelFunction = _SingleLevelFunction

_tls_set_vmap_excluded: Callable[[bool], None] = _functorch.tls_set_vmap_excluded  # type: ignore[attr-defined]
enable_single_level_autograd_function: Callable[[], Any] = (
    _autograd_function.enable_single_level_autograd_function  # type: ignore[attr-defined]
)
add_batch_dim = _functorch._add_batch_dim
unwrap_batched = _functorch._unwrap_batched
peek_interpreter_stack = _functorch.peek_interpreter_stack
CVmapInterpreterPtr = _functorch.CVmapInterpreterPtr
RandomnessType = _functorch.RandomnessType


def current_vmap_level() -> int:
    """Level of the innermost active functorch transform (a vmap, inside a batching kernel)."""
    level = _functorch.maybe_current_level()
    if level is None:
        raise RuntimeError("opreg: a batching rule ran outside of torch.vmap")
    return level


_unpack_dual: Callable[[torch.Tensor], Any] = _forward_ad.unpack_dual


def forward_mode_ad_active(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether forward-mode AD would pass through this call: a ``torch.func.jvp``/``jacfwd``
    level on top of functorch's stack, or a dual tensor among the arguments."""
    if torch._C._are_functorch_transforms_active():
        top = _functorch.peek_interpreter_stack()
        if top is not None and top.key() == _functorch.TransformType.Jvp:
            return True
    if _forward_ad._current_level < 0:
        return False
    for value in (*args, *kwargs.values()):
        for t in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(t, torch.Tensor) and _unpack_dual(t).tangent is not None:
                return True
    return False


def call_one_level_down(fn: Callable[..., Any], args: Any, kwargs: dict[str, Any]) -> Any:
    """Call ``fn`` one vmap level down: with ``FuncTorchBatched`` excluded, functorch's
    dynamic-layer keys pop the current level (the lowering ``torch.library.register_vmap``
    uses, through a cheaper TLS switch than a guard object)."""
    _tls_set_vmap_excluded(True)
    try:
        return fn(*args, **kwargs)
    finally:
        _tls_set_vmap_excluded(False)


class Library:
    """A typed wrapper of ``torch.library.Library`` (a ``FRAGMENT`` of one namespace)."""

    def __init__(self, namespace: str) -> None:
        self._lib = torch.library.Library(namespace, "FRAGMENT")  # type: ignore[no-untyped-call]

    def define(self, schema: str) -> None:
        self._lib.define(schema)  # type: ignore[no-untyped-call]

    def impl(
        self,
        opname: str,
        kernel: Callable[..., Any],
        dispatch_key: str,
        *,
        with_keyset: bool = False,
        allow_override: bool = False,
    ) -> None:
        extra = {"allow_override": True} if allow_override and _IMPL_ALLOWS_OVERRIDE else {}
        self._lib.impl(opname, kernel, dispatch_key, with_keyset=with_keyset, **extra)  # type: ignore[no-untyped-call]

    def register_fake(self, qualname: str, fake: Callable[..., Any]) -> None:
        torch.library.register_fake(qualname, fake, lib=self._lib)

    def destroy(self) -> None:
        self._lib._destroy()  # type: ignore[no-untyped-call]


def _impl_allows_override() -> bool:
    import inspect

    return "allow_override" in inspect.signature(torch.library.Library.impl).parameters


_IMPL_ALLOWS_OVERRIDE = _impl_allows_override()


def operator_exists(qualname: str) -> bool:
    """Whether the dispatcher knows an operator (default overload) of this name."""
    try:
        torch._C._dispatch_find_schema_or_throw(qualname, "")
    except RuntimeError:
        return False
    return True


def rebind_call(op_class: type, overload: torch._ops.OpOverload[Any, Any]) -> None:
    """Make instances of ``op_class`` call ``overload`` directly through the C++ entry point."""
    setattr(op_class, "__call__", overload._op)  # noqa: B010 (a class-level slot)


def apply_function(function: type, *args: Any) -> Any:
    return cast(Any, function).apply(*args)
