"""Layout variants of a sample: the same values in non-contiguous tensors.

Authors often give only contiguous samples, and a kernel that ignores strides (``x.view(-1)``,
pointer arithmetic on ``data_ptr()`` as if contiguous) passes on them. The kernel, vmap and
fake checks therefore also run every sample in three layouts; in each, every tensor argument
(keyword arguments and tensors in lists included) with at least 2 elements is replaced by a
view holding the same values:

- ``transposed``: the dims stored in reverse order (column-major; only tensors of 2+ dims
  that have 2 dims longer than 1 change),
- ``strided``: every other element of a buffer twice as long in the last dim longer than 1,
- ``offset``: a contiguous view that starts 1 element into its storage.

A variant is named after the sample, e.g. ``'#0 strided'``, and failure messages show the
strides and offsets of its tensors. Values are identical, so the expected results are too; an
argument the op mutates is a view, and its values are compared after the call as usual. A
layout that leaves every tensor of a sample as it was is not run. A variant the op itself
rejects with a ``TypeError`` or ``ValueError`` (e.g. "x must be contiguous") is not an
error: see :func:`rejects`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from opreg_core import SampleInput

from .samples import clone_sample, map_tensors, strided_copy

#: The layouts every sample is also checked in, in order.
LAYOUTS: tuple[str, ...] = ("transposed", "strided", "offset")


def _contiguous_strides(shape: tuple[int, ...], order: list[int]) -> tuple[int, ...]:
    """Strides of a dense tensor whose dims are stored in ``order`` (innermost last)."""
    strides = [0] * len(shape)
    step = 1
    for d in reversed(order):
        strides[d] = step
        step *= max(shape[d], 1)
    return tuple(strides)


def relayout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """``t``'s values in ``layout`` (see the module docstring); ``t`` itself if it cannot change."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; layouts: {', '.join(LAYOUTS)}")
    if type(t) is not torch.Tensor or t.layout != torch.strided or t.numel() < 2:
        return t
    shape = tuple(int(n) for n in t.shape)
    long_dims = [d for d, n in enumerate(shape) if n > 1]
    if layout == "transposed":
        if len(long_dims) < 2:
            return t
        stride = _contiguous_strides(shape, list(reversed(range(len(shape)))))
        return strided_copy(t, stride, 0)
    if layout == "strided":
        last = long_dims[-1]
        dense = _contiguous_strides(shape, list(range(len(shape))))
        doubled = tuple(2 * s if d <= last else s for d, s in enumerate(dense))
        return strided_copy(t, doubled, 0)
    return strided_copy(t, _contiguous_strides(shape, list(range(len(shape)))), 1)


def relayout_sample(sample: SampleInput, layout: str, name: str | None = None) -> SampleInput:
    """``sample`` with every tensor (args and kwargs) in ``layout``, named ``'<name> <layout>'``."""
    return dataclasses.replace(
        sample,
        args=map_tensors(lambda t: relayout(t, layout), sample.args),
        kwargs=map_tensors(lambda t: relayout(t, layout), sample.kwargs),
        name=f"{sample.name if name is None else name} {layout}",
    )


def _tensors(sample: SampleInput) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    map_tensors(found.append, (sample.args, sample.kwargs))
    return found


def changes(sample: SampleInput, layout: str) -> bool:
    """Whether ``layout`` changes the layout of at least one tensor of ``sample``."""
    return any(relayout(t, layout) is not t for t in _tensors(sample))


def layout_variants(sample: SampleInput) -> list[tuple[str, SampleInput]]:
    """``(layout, variant)`` for each layout that changes some tensor of ``sample``."""
    return [(kind, relayout_sample(sample, kind)) for kind in LAYOUTS if changes(sample, kind)]


def rejects(fn: Callable[..., Any], sample: SampleInput) -> str | None:
    """The error (``TypeError: ...``) with which ``fn`` refuses ``sample``, else None.

    Only ``TypeError`` and ``ValueError`` count as a refusal (an op's own "must be contiguous"
    check); any other exception propagates, and the calling check reports it.
    """
    copy = clone_sample(sample)
    try:
        fn(*copy.args, **copy.kwargs)
    except (TypeError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
