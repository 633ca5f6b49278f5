"""The op's fake against its kernel, at the first eager call of each kernel.

A fake (``fake_fn``) that predicts the wrong shape or dtype runs fine in eager and
``aot_eager`` and breaks only under Inductor, far from its cause (``AssertionError: wrong
number of dimensions``). The first call of each kernel (see ``_aliasing``) also runs the fake
on meta copies of the same inputs and compares each output's shape and dtype; later
calls cost nothing. A fake that cannot run outside a tracing context (data-dependent sizes
through ``torch.library.get_ctx()``, ``.item()``) is not compared: compile checks it there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import torch

from ._private import fake_run, tree_map_only

#: Whether the first-call comparison is paused (see :func:`first_call_fake_check_paused`).
_PAUSED: ContextVar[bool] = ContextVar("opreg_first_call_fake_check_paused", default=False)


@contextlib.contextmanager
def first_call_fake_check_paused() -> Iterator[None]:
    """Within the block, no kernel compares its first call's outputs with the op's fake, and
    no first call is used up: the next first call outside the block is compared.

    opreg-testing's checks pause it: the fake check compares the fake more thoroughly (strides,
    symbolic shapes), and the other checks should fail for their own reasons, not the fake's.
    """
    token = _PAUSED.set(True)
    try:
        yield
    finally:
        _PAUSED.reset(token)


def fake_check_paused() -> bool:
    """Whether :func:`first_call_fake_check_paused` is in effect here."""
    return _PAUSED.get()


def _meta(t: torch.Tensor) -> torch.Tensor:
    """A tensor with ``t``'s shape, strides and dtype on the meta device (no data)."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def meta_run(fake: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``fake`` on meta copies of the tensors of ``args`` and ``kwargs`` (lists too).

    Meta tensors, not a ``FakeTensorMode``: building one imports torch's compiler stack (and
    Triton) on a process's first call of an op; a fake written for tracing runs on meta
    tensors alike, and what it cannot tell there (the device) is not compared."""
    meta_args = tree_map_only(torch.Tensor, _meta, args)
    return fake(*meta_args, **tree_map_only(torch.Tensor, _meta, kwargs))


def _outputs(out: Any, num_returns: int) -> tuple[Any, ...]:
    return (out,) if num_returns == 1 else tuple(out or ())


def _shape(t: torch.Tensor) -> str:
    return "(" + ", ".join(str(d) for d in t.shape) + ("," if t.dim() == 1 else "") + ")"


def _differs(real: torch.Tensor, fake: torch.Tensor) -> str | None:
    """What differs between a kernel's output and the fake's ("shape (3, 4)" vs ...).

    In an autocast region the dtype is not compared: a function without an autocast rule
    computes in the region's dtype (its torch calls autocast), which its fake cannot know."""
    if tuple(real.shape) != tuple(fake.shape):
        return f"shape {_shape(real)}, but fake_fn returned shape {_shape(fake)}"
    autocasting = torch.is_autocast_enabled(real.device.type)
    if real.dtype != fake.dtype and not autocasting:
        return f"dtype {real.dtype}, but fake_fn returned dtype {fake.dtype}"
    return None


def check_fake(
    qualname: str,
    label: str,
    fake: Callable[..., Any],
    num_returns: int,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    out: Any,
) -> None:
    """Raise if the fake's outputs on ``args`` differ from ``out`` (the outputs of ``label``,
    a kernel of the op) in shape or dtype.

    The fake runs on meta tensors first (cheap, no import); only where that differs does it
    run again under a ``FakeTensorMode``, as torch.compile runs it, which decides: the meta
    device and fake tensors disagree for a few ops (``native_batch_norm``)."""
    try:
        found = _mismatch(qualname, label, num_returns, out, meta_run(fake, args, kwargs))
    except Exception:
        return  # the fake needs a tracing context (or more): compile checks it there
    if found is None:
        return
    try:
        found = _mismatch(qualname, label, num_returns, out, fake_run(fake, args, kwargs))
    except Exception:
        return  # not as torch.compile runs it: compile checks it there
    if found is not None:
        raise RuntimeError(found)


def _mismatch(qualname: str, label: str, num_returns: int, out: Any, predicted: Any) -> str | None:
    """The message for the first output whose shape or dtype the fake got wrong, or None."""
    real_outs, fake_outs = _outputs(out, num_returns), _outputs(predicted, num_returns)
    for i, (real, fake_out) in enumerate(zip(real_outs, fake_outs, strict=False)):
        pairs: list[tuple[str, Any, Any]] = [(f"output {i}", real, fake_out)]
        if isinstance(real, (list, tuple)) and isinstance(fake_out, (list, tuple)):
            if len(real) != len(fake_out):
                return (
                    f"opreg: {qualname}: output {i} of {label} is a list of {len(real)} "
                    f"tensors, but fake_fn returned {len(fake_out)}: fix fake_fn (torch.compile "
                    "traces with it)"
                )
            items = enumerate(zip(real, fake_out, strict=True))
            pairs = [(f"output {i}[{j}]", r, f) for j, (r, f) in items]
        for what, r, f in pairs:
            if not (isinstance(r, torch.Tensor) and isinstance(f, torch.Tensor)):
                continue
            found = _differs(r, f)
            if found is not None:
                return (
                    f"opreg: {qualname}: {what} of {label} on {r.device.type} has {found}: "
                    "fix fake_fn "
                    "(torch.compile traces with it, and Inductor fails on a wrong one)"
                )
    return None
