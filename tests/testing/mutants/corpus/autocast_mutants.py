"""The autocast check: ops whose behaviour under ``torch.autocast`` contradicts their declared
``autocast`` rule (mutants), and correct ops with a rule.

Three mutants replace opreg's rule with a hand-written one on the op's ``AutocastCPU`` key (a
``torch.library`` kernel, as a user porting from ``torch.library.register_autocast`` or a
hand-written AMP wrapper might leave behind): one casts the wrong inputs, one casts integer
inputs too, one casts without autograd seeing it (the backward never reaches the input, so no
gradient comes back in its dtype). The others get the dtype wrong elsewhere: a fake that
allocates float32 whatever the inputs' dtype, a Triton launcher that always returns float32.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor

from opreg_core import SampleInput, VmapOp, register_vmap_op
from opreg_testing import OpNamespace

from .spec import CorrectOp, Mutant, randn, save_inputs

_INDEX = "opreg_mutation_corpus.hand_written_autocast"


class _HandWrittenRule:
    """A ``torch.library`` kernel on the op's ``AutocastCPU`` key that replaces opreg's rule;
    held in ``op.extensions`` and destroyed with the op (``release``)."""

    def __init__(self, op: VmapOp[Any, Any], cast: Callable[[tuple[Any, ...]], tuple[Any, ...]]):
        self.lib = torch.library.Library(op.namespace, "FRAGMENT")  # type: ignore[no-untyped-call]
        entry = op.overload

        def kernel(*args: Any) -> Any:
            with torch.autocast("cpu", enabled=False):
                return entry(*cast(args))

        self.lib.impl(op.opname, kernel, "AutocastCPU", allow_override=True)  # type: ignore[no-untyped-call]
        op.extensions[_INDEX] = self

    def release(self) -> None:
        self.lib._destroy()  # type: ignore[no-untyped-call]


def _bf16(t: Any) -> Any:
    return t.to(torch.bfloat16) if isinstance(t, Tensor) else t


def _scale_samples(device: torch.device) -> Iterator[SampleInput]:
    yield SampleInput((randn(3, 4, seed=81).to(device), randn(4, seed=82).to(device)), name="3x4")


def _scale(ns: OpNamespace, name: str, **options: Any) -> VmapOp[Any, Any]:
    """``x * w`` (w broadcast over rows), lower precision under autocast, with a backward."""

    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor]:
        x, w, _ = ctx.saved_tensors
        return g * w, (g * x).sum(0)

    options = {"fake_fn": lambda x, w: torch.empty_like(x), **options}
    return register_vmap_op(
        lambda x, w: x * w,
        name=ns.qualname(name),
        schema="(Tensor x, Tensor w) -> Tensor",
        backward=backward,
        setup_context=save_inputs,
        sample_inputs=_scale_samples,
        autocast="lower_precision",
        **options,
    )


def _first_only(ns: OpNamespace) -> Any:
    op = _scale(ns, "autocast_casts_first_input_only")
    _HandWrittenRule(op, lambda args: (_bf16(args[0]), *args[1:]))
    return op


def _index_samples(device: torch.device) -> Iterator[SampleInput]:
    index = torch.tensor([2, 0, 2], device=device)
    yield SampleInput((randn(3, 4, seed=83).to(device), index), name="3x4, 3 rows")


def _index_rows(ns: OpNamespace, name: str) -> VmapOp[Any, Any]:
    """``2 * x[index]`` with an int64 index, lower precision under autocast."""
    return register_vmap_op(
        lambda x, index: x.index_select(0, index) * 2,
        name=ns.qualname(name),
        schema="(Tensor x, Tensor index) -> Tensor",
        fake_fn=lambda x, index: x.new_empty((index.shape[0], *x.shape[1:])),
        differentiable=False,
        sample_inputs=_index_samples,
        autocast="lower_precision",
    )


def _casts_integers(ns: OpNamespace) -> Any:
    op = _index_rows(ns, "autocast_casts_integer_inputs")
    _HandWrittenRule(op, lambda args: tuple(map(_bf16, args)))
    return op


def _not_differentiable(ns: OpNamespace) -> Any:
    op = _scale(ns, "autocast_cast_not_differentiable")

    def cast(args: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(_bf16(a.detach()) if isinstance(a, Tensor) else a for a in args)

    _HandWrittenRule(op, cast)
    return op


def _fake_float32(ns: OpNamespace) -> Any:
    return _scale(
        ns,
        "autocast_fake_always_float32",
        fake_fn=lambda x, w: torch.empty(x.shape, dtype=torch.float32, device=x.device),
    )


def _triton(name: str) -> Callable[[OpNamespace], Any]:
    def build(ns: OpNamespace) -> Any:
        from . import triton_ops  # imports Triton: only for runs that have it

        return triton_ops.MUTANT_BUILDERS.get(name, triton_ops.CORRECT_BUILDERS.get(name))(ns)  # type: ignore[misc]

    return build


MUTANTS = [
    Mutant(
        "autocast_casts_first_input_only",
        "autocast",
        "a hand-written rule casts x but not w: x * w then runs in float32",
        _first_only,
    ),
    Mutant(
        "autocast_casts_integer_inputs",
        "autocast",
        "a hand-written rule casts every tensor, the int64 index too",
        _casts_integers,
    ),
    Mutant(
        "autocast_cast_not_differentiable",
        "autocast",
        "a hand-written rule casts detached inputs: no gradient comes back in the input's dtype",
        _not_differentiable,
    ),
    Mutant(
        "autocast_fake_always_float32",
        "autocast",
        "fake_fn allocates float32 whatever the inputs' dtype (right for float32 samples only)",
        _fake_float32,
    ),
    Mutant(
        "triton_autocast_output_float32",
        "autocast",
        "the Triton launcher upcasts and returns float32 whatever the (cast) inputs' dtype",
        _triton("triton_autocast_output_float32"),
        triton=True,
    ),
]


# -- correct ops ---------------------------------------------------------------------------------


def _matmul_samples(device: torch.device) -> Iterator[SampleInput]:
    yield SampleInput(
        (randn(3, 4, seed=84).to(device), randn(4, 2, seed=85).to(device)), name="3x4 @ 4x2"
    )


def _matmul(ns: OpNamespace) -> Any:
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor]:
        x, w, _ = ctx.saved_tensors
        return g @ w.T, x.T @ g

    return register_vmap_op(
        torch.mm,
        name=ns.qualname("autocast_matmul"),
        schema="(Tensor x, Tensor w) -> Tensor",
        fake_fn=lambda x, w: x.new_empty((x.shape[0], w.shape[1])),
        vmap_fn=torch.bmm,
        fake_vmap_fn=lambda x, w: x.new_empty((x.shape[0], x.shape[1], w.shape[2])),
        backward=backward,
        setup_context=save_inputs,
        sample_inputs=_matmul_samples,
        autocast="lower_precision",
    )


def _log_softmax(x: Tensor) -> Tensor:
    return x - x.logsumexp(-1, keepdim=True)


def _softmax_samples(device: torch.device) -> Iterator[SampleInput]:
    yield SampleInput((randn(3, 5, seed=86).to(device),), name="3x5")
    yield SampleInput((randn(4, seed=87).to(device).to(torch.bfloat16),), name="4, bfloat16")


def _log_softmax_float32(ns: OpNamespace) -> Any:
    """log-softmax upcast to float32, its backward built with ``torch.func.vjp``."""

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        ctx.save_for_backward(inputs[0])

    def backward(ctx: Any, g: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        _, vjp = torch.func.vjp(_log_softmax, x)
        (gx,) = vjp(g)
        return gx

    return register_vmap_op(
        _log_softmax,
        name=ns.qualname("autocast_log_softmax"),
        schema="(Tensor x) -> Tensor",
        fake_fn=torch.empty_like,
        vmap_fn=_log_softmax,
        fake_vmap_fn=torch.empty_like,
        backward=backward,
        setup_context=setup,
        sample_inputs=_softmax_samples,
        autocast="float32",
    )


CORRECT = [
    CorrectOp("autocast_matmul", "mm, lower precision under autocast, with a backward", _matmul),
    CorrectOp(
        "autocast_log_softmax",
        "log-softmax upcast to float32, backward from torch.func.vjp",
        _log_softmax_float32,
    ),
    CorrectOp(
        "autocast_index_rows",
        "an int64 index input left alone by the rule",
        lambda ns: _index_rows(ns, "autocast_index_rows"),
    ),
    CorrectOp(
        "triton_rmsnorm_autocast",
        "a Triton RMSNorm in lower precision under autocast, with a Triton backward op",
        _triton("triton_rmsnorm_autocast"),
        triton="required",
    ),
]
