"""A backward or jvp that calls a Triton launcher directly: a clear error where it cannot work.

A launcher reads its tensors' memory. Plain ``.backward()`` hands a ``backward`` plain
tensors, so a backward that calls a launcher directly works there (as does a jvp under dual
tensors or ``torch.func.jvp`` alone, which opreg-core runs below its level); ``torch.func``
transforms (``grad``, ``jacrev``, ``vmap`` of either, any of them around a ``jvp``) hand it
wrappers without storage (as tangents or saved tensors), and ``torch.compile`` fake tensors,
so the launch fails deep inside Triton
("Cannot access storage of TensorWrapper"). Unwrapping them would give first derivatives but
silently wrong higher ones, so :func:`guard_derivatives` refuses the form instead: when the
backward (or jvp) of a ``register_triton_op`` op raises from inside Triton while such a tensor
reached it, the error names the op and says what works everywhere: register the backward's
computation as its own op (``register_triton_op``) and call that op from the backward.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ._dispatch_kernel import raised_in_triton
from ._private import functorch_wrapped

__all__ = ["DirectLaunchInDerivativeError", "guard_derivatives"]


class DirectLaunchInDerivativeError(RuntimeError):
    """A backward or jvp launched Triton directly on tensors that are not plain tensors."""


def _tensors(values: Iterable[Any]) -> Iterable[torch.Tensor]:
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from _tensors(value)


def _wrapped(values: Iterable[Any]) -> bool:
    """Whether a tensor among ``values`` is a wrapper or subclass, not a plain tensor."""
    return any(type(t) is not torch.Tensor or functorch_wrapped(t) for t in _tensors(values))


def _saved(ctx: Any) -> tuple[Any, ...]:
    """The tensors ``ctx`` holds for the backward or jvp (none if it cannot give them)."""
    try:
        return tuple(ctx.saved_tensors)
    except (AttributeError, RuntimeError):
        return ()


def _guard(qualname: str, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def guarded(ctx: Any, *values: Any) -> Any:
        try:
            return fn(ctx, *values)
        except Exception as exc:
            if not raised_in_triton(exc.__traceback__) or not (
                _wrapped(values) or _wrapped(_saved(ctx))
            ):
                raise
            raise DirectLaunchInDerivativeError(
                f"opreg: {qualname}: the {label} failed inside Triton "
                f"({type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}) "
                "because it launches a Triton kernel directly, on tensors that torch.func "
                "transforms (grad, jacrev, jvp, vmap of them) or torch.compile hand it as wrappers "
                "without storage (plain .backward() works, these do not). Register the "
                f"{label}'s computation as its own op with register_triton_op and call that op "
                f"from the {label}: it then works under every transform"
            ) from exc

    return guarded


def guard_derivatives(qualname: str, options: dict[str, object]) -> None:
    """Wrap ``options["backward"]`` and ``options["jvp"]`` (in place) with the guard. The op
    shows the guarded functions (``op.backward``), each ``functools.wraps`` of the user's:
    its name and docstring, and the user's function as ``__wrapped__``
    (``inspect.unwrap(op.backward)``)."""
    for label in ("backward", "jvp"):
        fn = options.get(label)
        if callable(fn):
            options[label] = _guard(qualname, label, fn)
