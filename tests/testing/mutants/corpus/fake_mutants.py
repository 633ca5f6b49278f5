"""Mutants the fake check must catch: fake implementations (``fake_fn``, ``fake_vmap_fn``)
that mispredict the real output's shape, dtype, device, strides or number of outputs."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from opreg_core import register_vmap_op
from opreg_testing import OpNamespace

from .spec import Mutant, matrices, unary


def _column_major(x: Tensor) -> Tensor:
    return x.new_empty(x.shape[::-1]).t() if x.dim() == 2 else torch.empty_like(x)


def _fake(name: str, wrong: str, fn: Any, fake_fn: Any, **kw: Any) -> Mutant:
    def build(ns: OpNamespace) -> Any:
        return unary(ns, name, fn, fake_fn=fake_fn, **kw)

    return Mutant(name, "fake", wrong, build)


def _two_outputs(ns: OpNamespace) -> Any:
    return register_vmap_op(
        lambda x: (x.sum(0), x * 2),
        name=ns.qualname("swapped_fake_outputs"),
        schema="(Tensor x) -> (Tensor, Tensor)",
        fake_fn=lambda x: (torch.empty_like(x), x.new_empty(x.shape[1:])),  # swapped
        sample_inputs=matrices,
    )


def _batched(name: str, wrong: str, fake_vmap_fn: Any) -> Mutant:
    def build(ns: OpNamespace) -> Any:
        return unary(
            ns,
            name,
            lambda x: x.sum(-1),
            fake_fn=lambda x: x.new_empty(x.shape[:-1]),
            vmap_fn=lambda x: x.sum(-1),
            fake_vmap_fn=fake_vmap_fn,
        )

    return Mutant(name, "fake", wrong, build)


MUTANTS = [
    _fake(
        "fake_shape",
        "fake_fn keeps the reduced dim (shape (n, m) for a sum over dim 0)",
        lambda x: x.sum(0),
        torch.empty_like,
    ),
    _fake(
        "fake_dtype",
        "fake_fn says float64 for a float32 output",
        lambda x: x * 2,
        lambda x: torch.empty_like(x, dtype=torch.float64),
    ),
    _fake(
        "fake_device",
        "fake_fn puts the output on the meta device",
        lambda x: x * 2,
        lambda x: torch.empty(x.shape, dtype=x.dtype, device="meta"),
    ),
    _fake(
        "fake_strides",
        "fake_fn returns a column-major tensor for a contiguous output",
        lambda x: x * 2,
        _column_major,
    ),
    _fake(
        "real_strides",
        "the op returns a transposed (non-contiguous) output, the fake a contiguous one",
        lambda x: (x.t() * 2).contiguous().t(),
        torch.empty_like,
    ),
    Mutant(
        "swapped_fake_outputs",
        "fake",
        "fake_fn returns the two outputs in the wrong order",
        _two_outputs,
    ),
    _batched(
        "fake_vmap_fn_drops_batch",
        "fake_vmap_fn forgets the batch dim",
        lambda x: x.new_empty(x.shape[1:-1]),
    ),
    _batched(
        "fake_vmap_fn_dtype",
        "fake_vmap_fn says int64",
        lambda x: x.new_empty(x.shape[:-1], dtype=torch.int64),
    ),
    _batched(
        "fake_vmap_fn_keeps_dim",
        "fake_vmap_fn keeps the reduced dim",
        torch.empty_like,
    ),
]
