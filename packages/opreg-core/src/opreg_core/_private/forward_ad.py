"""Forward-mode AD: a Function's jvp rule under dual levels and nested ``torch.func`` levels."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch._C._functorch as _functorch
import torch.autograd.forward_ad as _forward_ad

# torch.func's jvp nesting count (see the Why below).
from torch._functorch import eager_transforms as _eager_transforms

from .dispatch_state import (
    AUTOCAST_KEYS,
    DEFAULT_INCLUDED_KEYS,
    FRONT_BACK_KEYS,
    ForceDispatchKeyGuard,
    pop_layer,
    push_layer,
    tls_exclude,
    tls_include,
)
from .trees import tree_map_only

# Why: a Function's ``jvp`` gets zeros for inputs without a tangent and runs with forward AD
# off, which under ``torch.func`` also turns off every outer ``jvp``/``jacfwd`` level; opreg
# reads the dual level and functorch's interpreter stack to pass None instead of made-up zeros
# and to let outer levels differentiate the rule (``jacfwd(jacfwd(op))``). The rule runs inside
# the jvp level's dispatch, where functorch cannot start a transform: opreg runs it one level
# down (popping the level, as functorch does); with dual tensors a ``torch.func.jvp`` in the
# rule shares the open dual level through ``torch.func``'s own nesting count (``JVP_NESTING``).
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: a ``torch.autograd.Function`` jvp contract that composes with nested
# ``torch.func`` forward-mode levels (and with ``torch.func`` transforms inside the rule).

#: Dotted names of the internals used here.
INTERNALS: tuple[str, ...] = (
    "torch.autograd.forward_ad._current_level",
    "torch.autograd.forward_ad._set_fwd_grad_enabled",
    "torch._C._is_fwd_grad_enabled",
    "torch._C._functorch.CJvpInterpreterPtr",
    "torch._C._functorch.TransformType",
    "torch._C._functorch._wrap_for_grad",
    "torch._C._functorch._unwrap_for_grad",
    "torch._functorch.eager_transforms.JVP_NESTING",
)

#: The innermost open ``torch.autograd.forward_ad`` dual level, -1 with none open (dual
#: tensors may exist at 0 or above). A C-level partial: no Python frame on a call's path.
forward_ad_level: Callable[[], int] = functools.partial(getattr, _forward_ad, "_current_level")

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


class _CtxBelowLevel:
    """A jvp rule's view of autograd's ``ctx`` while the rule runs below its jvp level: the
    tensors it reads from ``ctx`` (``saved_tensors``, attributes set by ``setup_context``) are
    unwrapped from the level, as the tangents are; everything else passes through."""

    __slots__ = ("_ctx", "_level")

    def __init__(self, ctx: Any, level: int) -> None:
        object.__setattr__(self, "_ctx", ctx)
        object.__setattr__(self, "_level", level)

    def __getattr__(self, name: str) -> Any:
        level = self._level
        return tree_map_only(
            torch.Tensor,
            lambda t: _functorch._unwrap_for_grad(t, level),
            getattr(self._ctx, name),
        )

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._ctx, name, value)


@contextlib.contextmanager
def _dual_level_shared() -> Iterator[None]:
    """Let a ``torch.func.jvp`` started here use the dual level that is open, as a nested
    ``torch.func.jvp`` does: it would otherwise open its own, which PyTorch refuses inside
    another ("Nested forward mode AD is not supported"). Its functorch level keeps its
    tangents apart from the open level's, and it runs below with forward AD as found (off,
    in a jvp rule), so the open level's tangents do not enter the rule's computation."""
    _eager_transforms.JVP_NESTING += 1
    try:
        yield
    finally:
        _eager_transforms.JVP_NESTING -= 1


def call_jvp_rule(rule: Callable[..., Any], ctx: Any, *tangents: Any) -> Any:
    """``rule(ctx, *tangents)`` (a Function's jvp) where PyTorch lets it use ``torch.func``.

    Autograd calls a Function's ``jvp`` with forward AD off, inside the dispatch of the
    functorch jvp level being processed (``torch.func.jvp``/``jacfwd``): there functorch
    cannot start a new transform (``torch.func.jvp``/``vjp``/``vmap`` in the rule trip an
    internal assert), and the outer forward-mode levels must still differentiate the rule
    (``jacfwd(jacfwd(op))`` would silently lose its term). So the rule runs one level down,
    as functorch runs any operation it sends to the next level: the tensors of ``tangents``
    and those the rule reads from ``ctx`` are unwrapped from the level, the level is popped
    (with the fresh dispatch state functorch gives the next level, and forward AD as the
    level found it, for outer levels), and the tensors the rule returns are wrapped back into
    the level (as this level's tangents they carry no tangent of it). Outside such a level,
    with dual tensors (``torch.autograd.forward_ad``), a ``torch.func.jvp`` in the rule
    shares the open dual level (see :func:`_dual_level_shared`).
    """
    top = _jvp_interpreter()
    if top is None:
        if _forward_ad._current_level < 0:
            return rule(ctx, *tangents)
        with _dual_level_shared():
            return rule(ctx, *tangents)
    level = top.level()
    enabled = _functorch.CJvpInterpreterPtr(top).prevFwdGradMode()
    args = tree_map_only(torch.Tensor, lambda t: _functorch._unwrap_for_grad(t, level), tangents)
    view = _CtxBelowLevel(ctx, level)
    saved = pop_layer()
    try:
        with (
            ForceDispatchKeyGuard(*_dispatch_state_below()),
            _forward_ad._set_fwd_grad_enabled(enabled),
        ):
            out = rule(view, *args)
    finally:
        push_layer(saved)
    return tree_map_only(torch.Tensor, lambda t: _functorch._wrap_for_grad(t, level), out)


def _dispatch_state_below() -> tuple[Any, Any]:
    """The dispatch keys (included, excluded) that functorch gives an operation it sends from
    a jvp level to the next: its fresh state (transform and autograd keys no longer
    excluded), keeping the caller's autocast state; the dynamic-layer keys only while
    a level is left on the stack."""
    include = tls_include() | DEFAULT_INCLUDED_KEYS
    if _functorch.peek_interpreter_stack() is None:
        include = include - FRONT_BACK_KEYS
    else:
        include = include | FRONT_BACK_KEYS
    return include, tls_exclude() & AUTOCAST_KEYS
