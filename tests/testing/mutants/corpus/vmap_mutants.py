"""Mutants the vmap check must catch: batching rules (``vmap_fn``) that mix batch entries,
misplace the batch dim, or drop an argument."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from opreg_core import SampleInput, register_vmap_op
from opreg_testing import OpNamespace

from .spec import (
    FLAT_VMAP,
    NEEDS_DISTINCT_ENTRIES,
    Mutant,
    pairs,
    randn,
    unary,
    vectors,
)


def _mixing(
    name: str, wrong: str, fn: Any, vmap_fn: Any, needs: str | None = None, **kw: Any
) -> Mutant:
    """A one-tensor op whose ``vmap_fn`` is ``fn`` itself: a reduction then spans the batch."""

    def build(ns: OpNamespace) -> Any:
        return unary(ns, name, fn, vmap_fn=vmap_fn, **kw)

    return Mutant(name, "vmap", wrong, build, FLAT_VMAP, needs)


def _flat_sort(x: Tensor) -> Tensor:
    return x.reshape(-1).sort().values.reshape(x.shape)


def _flat_softmax(x: Tensor) -> Tensor:
    return x.reshape(-1).softmax(0).reshape(x.shape)


MIXING = [
    _mixing(
        "mean_over_batch",
        "vmap_fn subtracts the mean of the whole batch (x - x.mean())",
        lambda x: x - x.mean(),
        lambda x: x - x.mean(),
        NEEDS_DISTINCT_ENTRIES,
    ),
    _mixing(
        "sum_over_batch",
        "vmap_fn divides by the sum over the whole batch",
        lambda x: x / (x.abs().sum() + 1),
        lambda x: x / (x.abs().sum() + 1),
    ),
    _mixing(
        "norm_over_batch",
        "vmap_fn normalises by the norm of the whole batch",
        lambda x: x / x.norm(),
        lambda x: x / x.norm(),
    ),
    _mixing(
        "max_over_batch",
        "vmap_fn subtracts the max of the whole batch (x - x.amax())",
        lambda x: x - x.amax(),
        lambda x: x - x.amax(),
        NEEDS_DISTINCT_ENTRIES,
    ),
    _mixing(
        "minmax_over_batch",
        "vmap_fn rescales to [0, 1] with the min and max of the whole batch",
        lambda x: (x - x.amin()) / (x.amax() - x.amin()),
        lambda x: (x - x.amin()) / (x.amax() - x.amin()),
        NEEDS_DISTINCT_ENTRIES,
    ),
    _mixing(
        "std_over_batch",
        "vmap_fn standardises with the mean and std of the whole batch",
        lambda x: (x - x.mean()) / x.std(),
        lambda x: (x - x.mean()) / x.std(),
    ),
    _mixing(
        "median_over_batch",
        "vmap_fn subtracts the median of the whole batch",
        lambda x: x - x.median(),
        lambda x: x - x.median(),
        NEEDS_DISTINCT_ENTRIES,
    ),
    _mixing(
        "sort_over_batch",
        "vmap_fn sorts the values of the whole batch instead of each entry's",
        _flat_sort,
        _flat_sort,
    ),
    _mixing(
        "cumsum_over_batch",
        "vmap_fn takes the cumulative sum along the batch dim instead of the sample's dim",
        lambda x: x.cumsum(0),
        lambda x: x.cumsum(0),
        samples=vectors,
    ),
    _mixing(
        "softmax_over_batch",
        "vmap_fn takes the softmax over every element of the batch",
        _flat_softmax,
        _flat_softmax,
    ),
    _mixing(
        "logsumexp_over_batch",
        "vmap_fn subtracts the logsumexp of the whole batch",
        lambda x: x - x.logsumexp(tuple(range(x.dim()))),
        lambda x: x - x.logsumexp(tuple(range(x.dim()))),
    ),
    _mixing(
        "flipped_batch",
        "vmap_fn returns the batch entries in reverse order",
        torch.sin,
        lambda x: torch.sin(x).flip(0),
    ),
    _mixing(
        "batch_reshaped_wrongly",
        "vmap_fn flattens the batch the wrong way round (reshape(-1, B) instead of (B, -1))",
        lambda x: x.sum(),
        lambda x: x.reshape(-1, x.shape[0]).sum(0),
        fake_fn=lambda x: x.new_empty(()),
        fake_vmap_fn=lambda x: x.new_empty(x.shape[:1]),
    ),
    _mixing(
        "view_of_an_expanded_input",
        "vmap_fn calls view(), which fails on an input vmap moved or expanded (in_dims -1)",
        torch.cos,
        lambda x: torch.cos(x.view(x.shape[0], -1)).view(x.shape),
    ),
]


def _wrong_out_dims(ns: OpNamespace) -> Any:
    return unary(
        ns,
        "wrong_out_dims",
        lambda x: x * 2,
        vmap_fn=lambda x: x * 2,  # batch at dim 0 ...
        vmap_out_dims=1,  # ... declared at dim 1
    )


def _batch_at_the_end(ns: OpNamespace) -> Any:
    return unary(
        ns,
        "batch_at_the_end",
        lambda x: x * 2,
        vmap_fn=lambda x: (x * 2).movedim(0, -1),  # returns the batch last, declares 0
        fake_vmap_fn=lambda x: x.new_empty((*x.shape[1:], x.shape[0])),
    )


def _scaled_samples(device: torch.device) -> Iterator[SampleInput]:
    yield SampleInput((randn(3, 4, seed=11).to(device),), {"alpha": 2.5}, name="3x4, alpha=2.5")


def _ignores_kwarg(ns: OpNamespace) -> Any:
    return register_vmap_op(
        lambda x, *, alpha=1.0: x * alpha,
        name=ns.qualname("ignores_kwarg"),
        schema="(Tensor x, *, float alpha=1.0) -> Tensor",
        fake_fn=lambda x, *, alpha=1.0: torch.empty_like(x),
        vmap_fn=lambda x, *, alpha=1.0: x * 1.0,  # forgets alpha
        fake_vmap_fn=lambda x, *, alpha=1.0: torch.empty_like(x),
        sample_inputs=_scaled_samples,
    )


def _list_samples(device: torch.device) -> Iterator[SampleInput]:
    xs = [randn(3, 4, seed=s).to(device) for s in (12, 13, 14)]
    yield SampleInput((xs,), name="3 x (3x4)")


def _ignores_list_element(ns: OpNamespace) -> Any:
    return register_vmap_op(
        lambda xs: xs[0] + xs[1] * xs[2],
        name=ns.qualname("ignores_list_element"),
        schema="(Tensor[] xs) -> Tensor",
        fake_fn=lambda xs: torch.empty_like(xs[0]),
        vmap_fn=lambda xs: xs[0] + xs[1],  # forgets xs[2]
        fake_vmap_fn=lambda xs: torch.empty_like(xs[0]),
        sample_inputs=_list_samples,
    )


def _scalar_samples(device: torch.device) -> Iterator[SampleInput]:
    yield SampleInput((randn(3, 4, seed=15).to(device), 3), name="3x4, k=3")


def _ignores_scalar(ns: OpNamespace) -> Any:
    return register_vmap_op(
        lambda x, k: x.roll(k, -1),
        name=ns.qualname("ignores_scalar"),
        schema="(Tensor x, int k) -> Tensor",
        fake_fn=lambda x, k: torch.empty_like(x),
        vmap_fn=lambda x, k: x.roll(1, -1),  # always shifts by 1
        fake_vmap_fn=lambda x, k: torch.empty_like(x),
        sample_inputs=_scalar_samples,
    )


def _second_input_per_entry(ns: OpNamespace) -> Any:
    # Right when every argument is batched; when y is unbatched (in_dims None) opreg expands it
    # to the batch, and this vmap_fn uses only its first entry's first row for every entry.
    return register_vmap_op(
        lambda x, y: x * y,
        name=ns.qualname("first_row_of_y"),
        schema="(Tensor x, Tensor y) -> Tensor",
        fake_fn=lambda x, y: torch.empty_like(x),
        vmap_fn=lambda x, y: x * (y if y.stride(0) else y[:, :1]),
        fake_vmap_fn=lambda x, y: torch.empty_like(x),
        sample_inputs=pairs,
    )


def _per_entry_mean_of_all_dims(ns: OpNamespace) -> Any:
    return unary(
        ns,
        "mean_over_sample_dim_0_only",
        lambda x: x - x.mean(),
        vmap_fn=lambda x: x - x.mean(1, keepdim=True),  # reduces one dim, not all of them
    )


def _write_samples(device: torch.device) -> Iterator[SampleInput]:
    yield SampleInput((randn(3, 4, seed=16).to(device), randn(3, 4, seed=17).to(device)))


def _writer(ns: OpNamespace, name: str, vmap_fn: Any) -> Any:
    """``out <- 2 * x + out``, in place, with a wrong ``vmap_fn``."""

    def write(out: Tensor, x: Tensor) -> None:
        out.add_(2 * x)

    return register_vmap_op(
        write,
        name=ns.qualname(name),
        schema="(Tensor(a!) out, Tensor x) -> ()",
        mutates_args=("out",),
        fake_fn=lambda out, x: None,
        vmap_fn=vmap_fn,
        fake_vmap_fn=lambda out, x: None,
        sample_inputs=_write_samples,
    )


def _writes_entry_0_everywhere(out: Tensor, x: Tensor) -> None:
    out.copy_((out[:1] + 2 * x[:1]).expand_as(out))


def _writes_only_entry_0(out: Tensor, x: Tensor) -> None:
    out[:1].add_(2 * x[:1])


OTHER = [
    Mutant(
        "writes_entry_0_everywhere",
        "vmap",
        "an in-place vmap_fn writes entry 0's result into every entry of the written argument",
        lambda ns: _writer(ns, "writes_entry_0_everywhere", _writes_entry_0_everywhere),
    ),
    Mutant(
        "writes_only_entry_0",
        "vmap",
        "an in-place vmap_fn writes only the first entry of the written argument",
        lambda ns: _writer(ns, "writes_only_entry_0", _writes_only_entry_0),
    ),
    Mutant(
        "wrong_out_dims",
        "vmap",
        "vmap_out_dims=1 while vmap_fn returns the batch at dim 0",
        _wrong_out_dims,
        FLAT_VMAP,
    ),
    Mutant(
        "batch_at_the_end",
        "vmap",
        "vmap_fn returns the batch dim last while declaring it at 0",
        _batch_at_the_end,
        FLAT_VMAP,
    ),
    Mutant("ignores_kwarg", "vmap", "vmap_fn ignores the keyword argument alpha", _ignores_kwarg),
    Mutant(
        "ignores_list_element",
        "vmap",
        "vmap_fn ignores the third element of a list argument",
        _ignores_list_element,
        FLAT_VMAP,
    ),
    Mutant(
        "ignores_scalar",
        "vmap",
        "vmap_fn ignores an int argument (shift)",
        _ignores_scalar,
        FLAT_VMAP,
    ),
    Mutant(
        "unbatched_input_handled_wrongly",
        "vmap",
        "vmap_fn treats an unbatched (expanded) argument as one row",
        _second_input_per_entry,
        FLAT_VMAP,
    ),
    Mutant(
        "reduces_one_dim_only",
        "vmap",
        "vmap_fn reduces over one of the sample's dims instead of all of them",
        _per_entry_mean_of_all_dims,
        FLAT_VMAP,
    ),
]

MUTANTS = [*MIXING, *OTHER]
