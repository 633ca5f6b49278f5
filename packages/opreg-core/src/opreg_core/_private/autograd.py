"""Autograd: single-level autograd Functions, and kernels run below autograd."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import torch.autograd.forward_ad as _forward_ad

# Why: the ``Autograd`` kernel applies a *single-level* autograd Function, which records on the
# grad level's wrapper tensors as PyTorch's own ATen kernels do; this is what makes
# ``torch.func.grad``/``jacrev``/``vjp`` work where ``torch.library.register_autograd`` (through
# ``custom_function_call``) raises. The kernels redispatch below autograd with the guards and
# keysets of the dispatcher.
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: ``torch.library.register_autograd`` composing with ``torch.func``, and
# public below-autograd redispatch guards.
from torch._functorch import autograd_function as _autograd_function
from torch.autograd.function import _SingleLevelFunction

#: Dotted names of the internals used here.
INTERNALS: tuple[str, ...] = (
    "torch._functorch.autograd_function.enable_single_level_autograd_function",
    "torch.autograd.function._SingleLevelFunction",
    "torch.autograd.function._SingleLevelFunction._backward_cls",
    "torch._C._AutoDispatchBelowAutograd",
    "torch._C._AutoDispatchBelowADInplaceOrView",
    "torch._C._after_autograd_keyset",
    "torch._C._after_ADInplaceOrView_keyset",
)


#: What compiled autograd asks of a Function class and ``torch.autograd.Function`` defines
#: (``_SingleLevelFunction`` does not): the key of its graph nodes' compiled backward.
_COMPILED_AUTOGRAD: dict[str, Any] = {
    "_compiled_autograd_key": staticmethod(lambda ctx: (ctx._autograd_function_id,)),
}


def function_class(name: str, methods: dict[str, Any], *, node_calls_backward: bool) -> Any:
    """A single-level autograd Function class with ``methods`` (staticmethods), whose graph
    node calls the class's ``backward`` itself (``node_calls_backward``; a speed path, taken
    on a tested torch only: otherwise autograd's ``BackwardCFunction.apply`` calls it).

    The engine calls ``apply`` on the node (``PyNode::apply``), which ``BackwardCFunction``
    defines in Python: it looks the user's function up (``_get_user_fn``, for ``vjp``) and
    then calls it, two Python frames on every backward before the backward runs (on CUDA,
    on autograd's device thread). opreg's Functions define no ``vjp`` and no
    ``boxed_grads_call``, so the node's ``apply`` is their ``backward``; ``set_backward``
    keeps the two the same. (Compiled autograd calls ``_forward_cls.backward``, the same
    function.) Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
    Public replacement: an autograd Function whose node calls ``backward`` without a Python
    trampoline.
    """
    function: Any = type(name, (_SingleLevelFunction,), {**methods, **_COMPILED_AUTOGRAD})
    if node_calls_backward:
        function._backward_cls.apply = methods["backward"].__func__
    return function


def set_backward(function: Any, backward: Callable[..., Any]) -> None:
    """Make ``backward`` the backward of a :func:`function_class` class and of its nodes
    (recorded already or later: the node's class is looked up on each call, and
    ``BackwardCFunction.apply`` looks up the class's ``backward`` on each call)."""
    function.backward = staticmethod(backward)
    if "apply" in vars(function._backward_cls):  # the node calls backward itself
        function._backward_cls.apply = backward


enable_single_level_autograd_function: Callable[[], Any] = (
    _autograd_function.enable_single_level_autograd_function  # type: ignore[attr-defined]
)
AutoDispatchBelowAutograd = torch._C._AutoDispatchBelowAutograd
AutoDispatchBelowADInplaceOrView = torch._C._AutoDispatchBelowADInplaceOrView
AFTER_AUTOGRAD_KEYSET = torch._C._after_autograd_keyset
AFTER_AD_INPLACE_OR_VIEW_KEYSET = torch._C._after_ADInplaceOrView_keyset


def apply_function(function: type, *args: Any) -> Any:
    return cast(Any, function).apply(*args)


def below_autograd(
    kernel: Callable[..., Any],
    first_call: Callable[..., Any],
    requires_grad: Callable[[Any], bool],
    *,
    lists: bool,
    keywords: bool,
) -> Callable[..., Any]:
    """A kernel of an op declared non-differentiable, run with autograd off.

    The op's ``Autograd`` key is a fallthrough (no Python crossing), which leaves autograd on
    inside the kernels below it: without this guard a Python fallback made of differentiable
    torch calls would record a graph, and its derivative would leak through ``.backward()``
    (or, for dual tensors, its forward-mode tangent would leak into the output). The guard
    (``_AutoDispatchBelowAutograd``, ~0.4 us) is entered only where autograd could act: an
    input requires grad with grad mode on, or a dual level is open (``_current_level >= 0``,
    read here without a function call); random ops, the usual non-differentiable ones, take
    no such inputs. The registered function is this one (no wrapper object between the
    dispatcher and the kernel): it calls ``first_call`` (``kernel`` with its first call
    checked, see ``_aliasing``) until a call returns, then ``kernel`` itself.

    ``requires_grad(value)``: whether an argument (a tensor or a list of them) requires grad.
    ``lists``: the schema has a list of tensors (``Tensor[]``, ``Tensor?[]``), where
    ``torch._C._any_requires_grad`` skips a list holding a None (or a tuple), so each argument
    is checked with ``requires_grad``; otherwise that one C call checks them all.
    ``keywords``: the schema has keyword-only arguments (the dispatcher passes those, and only
    those, as keywords), so the kernel takes ``**kwargs``.
    """
    below = torch._C._AutoDispatchBelowAutograd
    grad_enabled = torch.is_grad_enabled
    any_requires_grad = torch._C._any_requires_grad
    tensor = torch.Tensor
    dual = _forward_ad
    run: Callable[..., Any]

    def first(*args: Any, **kwargs: Any) -> Any:
        nonlocal run
        out = first_call(*args, **kwargs)
        run = kernel  # the check passed: from now on the kernel itself
        return out

    run = first

    def guarded_keywords(*args: Any, **kwargs: Any) -> Any:
        if (any_requires_grad(*args, **kwargs) and grad_enabled()) or dual._current_level >= 0:
            with below():
                return run(*args, **kwargs)
        return run(*args, **kwargs)

    def guarded(*args: Any) -> Any:
        if (any_requires_grad(*args) and grad_enabled()) or dual._current_level >= 0:
            with below():
                return run(*args)
        return run(*args)

    def guarded_lists(*args: Any, **kwargs: Any) -> Any:
        if dual._current_level < 0 and grad_enabled():
            for a in args:
                if isinstance(a, tensor):
                    if a.requires_grad:
                        break
                elif isinstance(a, (list, tuple)) and requires_grad(a):
                    break
            else:
                if not (kwargs and any(map(requires_grad, kwargs.values()))):
                    return run(*args, **kwargs)
        elif dual._current_level < 0:
            return run(*args, **kwargs)
        with below():
            return run(*args, **kwargs)

    if lists:
        return guarded_lists
    return guarded_keywords if keywords else guarded
