"""Outputs that alias inputs, caught at the first eager call of each kernel.

An op's outputs must be new tensors (a schema that declares an output alias is refused at
registration, see ``_signature``): an output that is an input, a view of one, or a view of
another output runs fine in eager but gives silently wrong results under ``torch.compile``
and functionalization, which assume it is not. ``torch.library.custom_op`` checks every
call. opreg checks the first call of every kernel it registers (the fallback and ``vmap_fn``
on each dispatch key, each ``register_kernel`` kernel, Triton launchers included) and then
gets out of the way: the dispatcher calls an object whose class's ``__call__`` is the check,
swapped for the kernel itself once a call passes, so later calls run no Python frame of
opreg's. A kernel that aliases only for some inputs (``x.contiguous()``, ``x.to(dtype)``,
``x if n == 0 else ...``) is caught where its first call aliases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from ._fake_check import check_fake, fake_check_paused
from ._private import parse_schema, storage_id


def _argument_names(qualname: str, schema: str) -> tuple[str, ...]:
    """The argument names, in the order the dispatcher passes them positionally."""
    return tuple(a.name for a in parse_schema(f"{qualname}{schema}").arguments)


def _tensors(value: Any, label: str) -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors of an argument or output (a tensor, or a list of them), labelled."""
    if isinstance(value, torch.Tensor):
        yield label, value
    elif isinstance(value, (list, tuple)):
        for i, t in enumerate(value):
            if isinstance(t, torch.Tensor):
                yield f"{label}[{i}]", t


def check_fresh_outputs(
    qualname: str,
    label: str,
    names: tuple[str, ...],
    num_returns: int,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    out: Any,
) -> None:
    """Raise if an output of ``label`` (a kernel of the op) shares storage with an input or
    with another output."""
    inputs: dict[int, str] = {}
    for i, a in enumerate(args):
        for name, t in _tensors(a, names[i] if i < len(names) else f"argument {i}"):
            key = storage_id(t)
            if key is not None:
                inputs.setdefault(key, name)
    for key_name, a in kwargs.items():
        for name, t in _tensors(a, key_name):
            key = storage_id(t)
            if key is not None:
                inputs.setdefault(key, name)
    outs = (out,) if num_returns == 1 else tuple(out or ())
    seen: dict[int, str] = {}
    for i, o in enumerate(outs):
        for what, t in _tensors(o, f"output {i}"):
            key = storage_id(t)
            if key is None:
                continue
            if key in inputs:
                name = inputs[key]
                raise RuntimeError(
                    f"opreg: {qualname}: {what} of {label} aliases input '{name}' (a view of it "
                    f"or the input itself): return a new tensor, e.g. {name}.clone(). An op's "
                    "outputs must not alias its inputs: torch.compile and functionalization "
                    "assume they do not, and would give wrong results without an error"
                )
            if key in seen:
                raise RuntimeError(
                    f"opreg: {qualname}: {what} of {label} aliases {seen[key]} (the same tensor "
                    "or a view of it): return separate tensors, e.g. a .clone() of one. An op's "
                    "outputs must not alias each other: torch.compile and functionalization "
                    "assume they do not, and would give wrong results without an error"
                )
            seen[key] = what


class CheckedKernel:
    """Base of the objects :func:`first_call_checked` returns (one class each: its
    ``__call__`` is swapped for the kernel once a call passes)."""

    __slots__ = ()


def first_call_checked(
    kernel: Callable[..., Any],
    qualname: str,
    label: str,
    schema: str,
    num_returns: int,
    fake: Callable[..., Any] | None = None,
) -> Callable[..., Any]:
    """``kernel`` as the dispatcher calls it: its first call that returns checks the outputs
    (:func:`check_fresh_outputs`, and against ``fake``, the op's fake: ``_fake_check``), and
    every call after a passing one is the kernel's own."""
    if num_returns == 0:
        return kernel  # nothing returned, nothing to alias
    names = _argument_names(qualname, schema)

    def first(*args: Any, **kwargs: Any) -> Any:
        out = kernel(*args, **kwargs)
        check_fresh_outputs(qualname, label, names, num_returns, args, kwargs, out)
        if fake is not None:
            if fake_check_paused():
                return out  # the first call stays to come (opreg-testing's checks run)
            check_fake(qualname, label, fake, num_returns, args, kwargs, out)
        cls.__call__ = staticmethod(kernel)  # type: ignore[method-assign]
        return out

    cls = type(
        "OpregKernel",
        (CheckedKernel,),
        {"__slots__": (), "__call__": staticmethod(first), "__wrapped__": kernel},
    )
    checked: Callable[..., Any] = cls()
    return checked


def passed_kernel(kernel: Callable[..., Any]) -> Callable[..., Any]:
    """What a call of ``kernel`` runs once one of its calls has returned: for an object of
    :func:`first_call_checked`, the kernel it wraps (its check has then passed; calling it
    directly saves the call through the object); any other kernel is itself."""
    if isinstance(kernel, CheckedKernel):
        wrapped: Callable[..., Any] = type(kernel).__wrapped__
        return wrapped
    return kernel
