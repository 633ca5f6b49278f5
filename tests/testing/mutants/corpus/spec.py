"""What a corpus entry is: a wrong op (a mutant) that one check must catch, or a correct op
that every check must pass; and the small helpers the entries share (samples, registration)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from opreg_core import SampleInput, VmapOp, register_vmap_op
from opreg_testing import OpNamespace

#: Registers the entry's op in a fresh namespace and returns it (shipped ops: returns the op).
Build = Callable[[OpNamespace], Any]

#: Work of the other helpers of issue 10 that some mutants need before a check can catch them.
NEEDS_DISTINCT_ENTRIES = (
    "vmap batch entries that differ in value, not only in order (checks/_vmap_cases.py)"
)
NEEDS_LAYOUTS = "layout (non-contiguous) variants of every sample (kernel/vmap/fake checks)"
NEEDS_CORE_REDUCTION = (
    "the derived batched backward reducing per-sample gradients like autograd (opreg_core)"
)


@dataclass(frozen=True)
class Mutant:
    """A deliberately wrong op, and the check that must catch it."""

    name: str
    check: str
    wrong: str  #: what is wrong with it, in one line
    build: Build
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    needs: str | None = None  #: other work the check needs to catch it (None: nothing)
    triton: bool = False  #: runs Triton kernels (on CPU through Triton's interpreter)


@dataclass(frozen=True)
class CorrectOp:
    """A correct op: every check must pass or skip it, and at least one must pass."""

    name: str
    what: str
    build: Build
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    needs: str | None = None
    #: "none", "optional" (runs its Triton kernels on CPU where the interpreter can, else its
    #: fallback: the shipped ops) or "required" (skipped without Triton)
    triton: str = "none"


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> Tensor:
    return torch.randn(shape, generator=generator(seed), dtype=dtype)


def positive(*shape: int, seed: int = 0) -> Tensor:
    """Values in [0.5, 2.5): a positive-only domain (log, sqrt)."""
    return torch.rand(shape, generator=generator(seed)) * 2 + 0.5


def matrices(device: torch.device) -> Iterator[SampleInput]:
    """Two small non-square samples, so that a wrong batch dim changes the shape."""
    yield SampleInput((randn(3, 4, seed=1).to(device),), name="3x4")
    yield SampleInput((randn(2, 5, seed=2).to(device),), name="2x5")


def vectors(device: torch.device) -> Iterator[SampleInput]:
    yield SampleInput((randn(5, seed=3).to(device),), name="5")
    yield SampleInput((randn(4, seed=4).to(device),), name="4")


def pairs(device: torch.device) -> Iterator[SampleInput]:
    """Two same-shaped tensors (3x4), then (2x5)."""
    yield SampleInput((randn(3, 4, seed=5).to(device), randn(3, 4, seed=6).to(device)), name="3x4")
    yield SampleInput((randn(2, 5, seed=7).to(device), randn(2, 5, seed=8).to(device)), name="2x5")


def unary(
    ns: OpNamespace,
    opname: str,
    fn: Callable[[Tensor], Tensor],
    *,
    vmap_fn: Callable[..., Any] | None = None,
    fake_fn: Callable[..., Any] = torch.empty_like,
    fake_vmap_fn: Callable[..., Any] | None = None,
    samples: Callable[[torch.device], Iterator[SampleInput]] = matrices,
    **options: Any,
) -> VmapOp[Any, Any]:
    """``register_vmap_op`` of a one-tensor op ``(Tensor x) -> Tensor`` in ``ns``."""
    if vmap_fn is not None and fake_vmap_fn is None:
        fake_vmap_fn = fake_fn
    return register_vmap_op(
        fn,
        name=ns.qualname(opname),
        schema=options.pop("schema", "(Tensor x) -> Tensor"),
        fake_fn=fake_fn,
        vmap_fn=vmap_fn,
        fake_vmap_fn=fake_vmap_fn,
        sample_inputs=samples,
        **options,
    )


def save_inputs(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    """``setup_context`` saving every tensor input (in order) and the output."""
    ctx.save_for_backward(*[a for a in inputs if isinstance(a, Tensor)], output)


def contiguous_like(x: Tensor) -> Tensor:
    """A fake for ops whose output is a new contiguous tensor of x's shape, whatever x's layout
    (``torch.empty_like`` would copy a transposed input's strides)."""
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def rest(x: Tensor) -> tuple[int, ...]:
    """The non-batch dims of a batched tensor (for per-entry reductions in a ``vmap_fn``)."""
    return tuple(range(1, x.dim()))


#: vmap options for mutants whose mistake does not depend on nesting (keeps the corpus fast).
FLAT_VMAP: Mapping[str, Mapping[str, Any]] = {"vmap": {"nested": False}}
