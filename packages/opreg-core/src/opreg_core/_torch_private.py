"""Typed access to the PyTorch internals opreg relies on, kept in one place.

These are private APIs of ``torch._C``, ``torch._functorch`` and ``torch.library``; a torch
upgrade that moves one of them breaks only this module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, cast

import torch
import torch._C._functorch as _functorch
import torch.autograd.forward_ad as _forward_ad
from torch._functorch import autograd_function as _autograd_function
from torch.autograd.function import _SingleLevelFunction
from torch.utils._pytree import tree_map_only

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


def tangent_flags(values: Any) -> list[bool] | None:
    """Which of ``values`` carry a tangent at the current dual level (None outside one).

    Autograd hands a Function's ``jvp`` a zero tangent for an input without one; these flags
    let opreg pass None instead, as its contract says."""
    if _forward_ad._current_level < 0:
        return None
    with _forward_ad._set_fwd_grad_enabled(True):  # autograd turned it off around setup
        return [isinstance(v, torch.Tensor) and _unpack_dual(v).tangent is not None for v in values]


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


def transform_grad_modes() -> tuple[bool, bool] | None:
    """Grad mode and forward-grad mode while ``torch.func`` transforms are active, else None."""
    if not torch._C._are_functorch_transforms_active():
        return None
    return torch.is_grad_enabled(), torch._C._is_fwd_grad_enabled()


@contextlib.contextmanager
def grad_modes(modes: tuple[bool, bool]) -> Iterator[None]:
    """Set grad mode and forward-grad mode (as :func:`transform_grad_modes` returned them)."""
    with torch.set_grad_enabled(modes[0]), _forward_ad._set_fwd_grad_enabled(modes[1]):
        yield


def _jvp_interpreter() -> Any:
    """The functorch jvp transform being processed (top of the stack), or None."""
    if not torch._C._are_functorch_transforms_active():
        return None
    top = _functorch.peek_interpreter_stack()
    if top is None or top.key() != _functorch.TransformType.Jvp:
        return None
    return top


@contextlib.contextmanager
def tangents_of_outer_levels() -> Iterator[None]:
    """Run a jvp rule so that outer forward-mode levels differentiate it, not its own level.

    Autograd calls a Function's ``jvp`` with forward AD switched off, which under
    ``torch.func`` also switches off every outer ``jvp``/``jacfwd`` level: a second forward
    derivative (``jacfwd(jacfwd(op))``) would silently lose the rule's contribution. Inside a
    functorch jvp level this turns forward AD back on (as the level found it) and skips this
    level's autograd kernels, so the rule's operations get tangents from outer levels only.
    """
    top = _jvp_interpreter()
    if top is None:
        yield
        return
    enabled = _functorch.CJvpInterpreterPtr(top).prevFwdGradMode()
    with _forward_ad._set_fwd_grad_enabled(enabled), torch._C._AutoDispatchBelowAutograd():
        yield


def call_below_jvp_level(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` one level below the functorch jvp level being processed, if any.

    The Function's ``jvp`` runs inside that level's dispatch, where functorch cannot start a
    new transform (a ``torch.vmap`` there trips an internal assert). The tensors of ``args``
    are unwrapped from the level, the level is popped while ``fn`` runs (with the fresh
    dispatch state functorch gives any operation sent to the next level, and forward AD as
    the level found it, for outer levels), and the tensors ``fn`` returns are wrapped back
    into the level (as tangents of this level they carry no tangent themselves).
    """
    top = _jvp_interpreter()
    if top is None:
        return fn(*args)
    level = top.level()
    enabled = _functorch.CJvpInterpreterPtr(top).prevFwdGradMode()
    args = tree_map_only(torch.Tensor, lambda t: _functorch._unwrap_for_grad(t, level), args)
    saved = _functorch.pop_dynamic_layer_stack()
    try:
        with (
            torch._C._ForceDispatchKeyGuard(*_dispatch_state_below()),
            _forward_ad._set_fwd_grad_enabled(enabled),
        ):
            out = fn(*args)
    finally:
        _functorch.push_dynamic_layer_stack(saved)
    return tree_map_only(torch.Tensor, lambda t: _functorch._wrap_for_grad(t, level), out)


def _keys(*names: str) -> Any:
    result = torch._C.DispatchKeySet(torch._C.DispatchKey.Undefined)
    for name in names:
        result = result | torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, name))
    return result


_AUTOCAST_KEYS = _keys(*(k for k in torch._C.DispatchKey.__members__ if k.startswith("Autocast")))
_FRONT_BACK = _keys("FuncTorchDynamicLayerFrontMode", "FuncTorchDynamicLayerBackMode")
_DEFAULT_INCLUDED = _keys("BackendSelect", "ADInplaceOrView")


def _dispatch_state_below() -> tuple[Any, Any]:
    """The dispatch keys (included, excluded) that functorch gives an operation it sends from
    a jvp level to the next: its fresh state (transform and autograd keys no longer
    excluded), keeping the caller's autocast state; the dynamic-layer keys only while
    a level is left on the stack."""
    include = torch._C._dispatch_tls_local_include_set() | _DEFAULT_INCLUDED
    if _functorch.peek_interpreter_stack() is None:
        include = include - _FRONT_BACK
    else:
        include = include | _FRONT_BACK
    return include, torch._C._dispatch_tls_local_exclude_set() & _AUTOCAST_KEYS


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


def dispatch_key_for_device(device_type: str) -> str:
    """The backend dispatch key name of a device type (``"cuda"`` -> ``"CUDA"``); RuntimeError
    for a device type this torch build does not know."""
    return str(torch._C._dispatch_key_for_device(device_type))


def rebind_call(op_class: type, overload: torch._ops.OpOverload[Any, Any]) -> None:
    """Make instances of ``op_class`` call ``overload`` directly through the C++ entry point."""
    setattr(op_class, "__call__", overload._op)  # noqa: B010 (a class-level slot)


def apply_function(function: type, *args: Any) -> Any:
    return cast(Any, function).apply(*args)
