"""The ways the sweep runs an op, each once with the opreg op and once with the native op.

eager; vmap with several ``in_dims`` (0 everywhere, -1, one input unbatched, nested depth 2);
grad; grad(vmap); vmap(grad); jvp; jacfwd; torch.compile (aot_eager, fullgraph). Each is a
function ``(f, case) -> result`` run for ``f`` = the opreg op and ``f`` = the native op.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree

from .build import OpCase, with_diff

Fn = Callable[..., Any]
#: A way of running an op: ``(f, case) -> result``, or None when it does not apply to ``case``.
Transform = Callable[[Fn, OpCase], Any]

BATCH = 3
#: The vmap the transforms use: torch.vmap, or a per-sample loop (see :func:`loop_vmap`).
_vmap_impl: list[Callable[..., Fn]] = [torch.vmap]


def _vmap(fn: Fn, in_dims: Any = 0) -> Fn:
    return _vmap_impl[-1](fn, in_dims=in_dims)


def _loop(fn: Fn, in_dims: Any = 0) -> Fn:
    """vmap as a loop: ``fn`` on each batch entry, outputs stacked at dim 0."""

    def run(*args: Any) -> Any:
        dims = in_dims if isinstance(in_dims, tuple) else (in_dims,) * len(args)
        size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
        outs = [
            fn(*(a if d is None else a.select(d, k) for a, d in zip(args, dims, strict=True)))
            for k in range(size)
        ]
        return pytree.tree_map(lambda *xs: torch.stack(xs), outs[0], *outs[1:])

    return run


@contextlib.contextmanager
def loop_vmap() -> Iterator[None]:
    """Within the block, the transforms vmap by a per-sample loop: the reference that tells
    who is right when opreg and ``torch.vmap`` of the native op disagree."""
    _vmap_impl.append(_loop)
    try:
        yield
    finally:
        _vmap_impl.pop()


NESTED = (2, 3)
_fresh_counter = itertools.count()


def entries(t: torch.Tensor, n: int) -> list[torch.Tensor]:
    """``n`` batch entries of ``t`` that differ in value (floating) or repeat it (integers: an
    index or a mask stays valid). A positive scale keeps signs, domains and definiteness."""
    if not t.dtype.is_floating_point:
        return [t.clone() for _ in range(n)]
    return [t * (1.0 - 0.125 * k) for k in range(n)]


def stacked(t: torch.Tensor, n: int, dim: int = 0) -> torch.Tensor:
    return torch.stack(entries(t, n), dim=dim)


def weights(case: OpCase) -> list[torch.Tensor]:
    """Fixed random weights in [0.5, 1.5), one per floating output, of its (per-sample) shape."""
    g = torch.Generator().manual_seed(1234)
    return [
        torch.rand(case.out_shapes[k], generator=g, dtype=torch.float64).to(case.dtype) + 0.5
        for k in case.float_outputs
    ]


def loss_of(case: OpCase, f: Fn) -> Fn:
    """``sum(w * out)`` over the floating outputs: a scalar that every output element reaches
    (made outside any vmap: a random call inside one raises)."""
    ws = weights(case)

    def loss(*args: Any) -> torch.Tensor:
        outs = case.outputs(f(*args))
        terms = [(outs[k] * w).sum() for k, w in zip(case.float_outputs, ws, strict=True)]
        return torch.stack(terms).sum()

    return loss


def _in_dims(case: OpCase, batched: Callable[[int], int | None]) -> tuple[int | None, ...]:
    return tuple(batched(i) if i in case.tensor_pos else None for i in range(len(case.args)))


def _batch_args(case: OpCase, in_dims: Sequence[int | None], n: int) -> tuple[Any, ...]:
    return tuple(
        a if d is None else stacked(a, n, d if d >= 0 else a.dim() + 1 + d)
        for a, d in zip(case.args, in_dims, strict=True)
    )


def vmap_case(batched: Callable[[OpCase, int], int | None]) -> Transform:
    def run(f: Fn, case: OpCase) -> Any:
        in_dims = _in_dims(case, lambda i: batched(case, i))
        return _vmap(f, in_dims=in_dims)(*_batch_args(case, in_dims, BATCH))

    return run


def nested_vmap(inner_none: bool) -> Transform:
    """vmap(vmap(f)): batch dims (2, 3); with ``inner_none``, the last tensor argument is
    batched only at the outer level."""

    def run(f: Fn, case: OpCase) -> Any:
        last = case.tensor_pos[-1]
        inner = _in_dims(case, lambda i: None if inner_none and i == last else 0)
        outer = _in_dims(case, lambda i: 0)
        args = []
        for i, a in enumerate(case.args):
            if i not in case.tensor_pos:
                args.append(a)
            elif inner[i] is None:
                args.append(stacked(a, NESTED[0]))
            else:
                es = entries(a, NESTED[0] * NESTED[1])
                args.append(torch.stack(es).reshape(*NESTED, *a.shape))
        return _vmap(_vmap(f, in_dims=inner), in_dims=outer)(*args)

    return run


def grad_case(f: Fn, case: OpCase) -> Any:
    return torch.func.grad(loss_of(case, f), argnums=case.diff_pos)(*case.args)


def _first_diff_batched(case: OpCase) -> tuple[int | None, ...]:
    first = case.diff_pos[0]
    return tuple(0 if i == first else None for i in range(len(case.args)))


def _last_diff_batched(case: OpCase) -> tuple[int | None, ...]:
    last = case.diff_pos[-1]
    return tuple(0 if i == last else None for i in range(len(case.args)))


def grad_vmap(batched: Callable[[OpCase], tuple[int | None, ...]]) -> Transform:
    """grad of a vmapped computation: the ``batched`` arguments batched, the others not (their
    gradient sums over the batch)."""

    def run(f: Fn, case: OpCase) -> Any:
        in_dims = batched(case)
        args = _batch_args(case, in_dims, BATCH)

        def total(*a: Any) -> torch.Tensor:
            per_sample = _vmap(loss_of(case, f), in_dims=in_dims)(*a)
            return (per_sample * torch.arange(1, BATCH + 1, dtype=per_sample.dtype)).sum()

        return torch.func.grad(total, argnums=case.diff_pos)(*args)

    return run


def vmap_grad(f: Fn, case: OpCase) -> Any:
    in_dims = _first_diff_batched(case)
    args = _batch_args(case, in_dims, BATCH)
    return _vmap(torch.func.grad(loss_of(case, f), argnums=case.diff_pos), in_dims=in_dims)(*args)


def _tangents(case: OpCase) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(4321)
    return tuple(
        torch.randn(case.args[i].shape, generator=g, dtype=torch.float64).to(case.dtype)
        for i in case.diff_pos
    )


def jvp_case(f: Fn, case: OpCase) -> Any:
    fn = with_diff(_as_case(case, f), case.args)
    primals = tuple(case.args[i] for i in case.diff_pos)
    return torch.func.jvp(fn, primals, _tangents(case))


def jacfwd_case(f: Fn, case: OpCase) -> Any:
    fn = with_diff(_as_case(case, f), case.args)
    primals = tuple(case.args[i] for i in case.diff_pos)
    return torch.func.jacfwd(fn, argnums=0)(*primals)


def _as_case(case: OpCase, f: Fn) -> OpCase:
    """``case`` with ``f`` in place of its fallback (for :func:`with_diff`)."""
    return dataclasses.replace(case, fallback=f)


def fresh(fn: Fn) -> Fn:
    """A wrapper of ``fn`` with its own code object (its own Dynamo cache entry)."""

    def call(*args: Any) -> Any:
        return fn(*args)

    code = call.__code__.replace(co_name=f"opinfo_sweep_{next(_fresh_counter)}")
    return types.FunctionType(code, call.__globals__, code.co_name, None, call.__closure__)


def compiled(f: Fn, case: OpCase) -> Any:
    return torch.compile(fresh(f), backend="aot_eager", fullgraph=True)(*case.args)


def why_not(case: OpCase, name: str) -> str | None:
    """Why ``name`` does not apply to ``case`` (None: it does)."""
    if name.startswith(("grad", "vmap(grad")) and not case.differentiable:
        return "no differentiable input/output" if case.supports_autograd else "no autograd"
    if name.startswith(("jvp", "jacfwd")) and not case.differentiable:
        return "no differentiable input/output"
    if "only the last" in name and len(case.diff_pos) < 2:
        return "one floating tensor argument"
    if "one unbatched" in name and len(case.tensor_pos) < 2:
        return "one tensor argument"
    if name == "jacfwd" and case.args[case.diff_pos[0]].numel() > 400:
        return "large input"
    return None


#: name -> transform, in the order they run.
TRANSFORMS: dict[str, Transform] = {
    "eager": lambda f, case: f(*case.args),
    "vmap(in_dims=0)": vmap_case(lambda case, i: 0),
    "vmap(in_dims=-1)": vmap_case(lambda case, i: -1),
    "vmap(one unbatched: last tensor None)": vmap_case(
        lambda case, i: None if i == case.tensor_pos[-1] else 0
    ),
    "vmap(vmap)": nested_vmap(inner_none=False),
    "vmap(vmap, one unbatched inner)": nested_vmap(inner_none=True),
    "grad": grad_case,
    "grad(vmap)": grad_vmap(_first_diff_batched),
    "grad(vmap, only the last float input batched)": grad_vmap(_last_diff_batched),
    "vmap(grad)": vmap_grad,
    "jvp": jvp_case,
    "jacfwd": jacfwd_case,
    "compile(aot_eager, fullgraph)": compiled,
}


#: The transforms that leave some tensor argument unbatched, with their (innermost) in_dims.
UNBATCHED_IN_DIMS: dict[str, Callable[[OpCase], tuple[int | None, ...]]] = {
    "vmap(one unbatched: last tensor None)": lambda case: _in_dims(
        case, lambda i: None if i == case.tensor_pos[-1] else 0
    ),
    "vmap(vmap, one unbatched inner)": lambda case: _in_dims(
        case, lambda i: None if i == case.tensor_pos[-1] else 0
    ),
    "grad(vmap)": _first_diff_batched,
    "grad(vmap, only the last float input batched)": _last_diff_batched,
    "vmap(grad)": _first_diff_batched,
}


def expanded_rule_error(case: OpCase, in_dims: Sequence[int | None]) -> BaseException | None:
    """What the generic ``vmap_fn`` raises when, as opreg's contract says, the arguments that
    ``in_dims`` leaves unbatched arrive expanded to the batch (stride 0); None: it works."""
    from .build import vmap_rule

    args = [
        a
        if i not in case.tensor_pos
        else stacked(a, BATCH)
        if in_dims[i] is not None
        else a.unsqueeze(0).expand(BATCH, *a.shape)
        for i, a in enumerate(case.args)
    ]
    try:
        vmap_rule(case)(*args)
    except Exception as exc:  # the evidence is the raise itself
        return exc
    return None


def _nested_batch(case: OpCase, levels: Sequence[Sequence[int | None]]) -> tuple[Any, ...]:
    """The sample's arguments batched at each level of ``levels`` (in_dims, outermost first)."""
    args: tuple[Any, ...] = case.args
    for dims in reversed(levels):
        args = tuple(
            a if d is None else stacked(a, BATCH, d if d >= 0 else a.dim() + 1 + d)
            for a, d in zip(args, dims, strict=True)
        )
    return args


def _nested_vmap(fn: Fn, levels: Sequence[Sequence[int | None]]) -> Fn:
    for dims in reversed(levels):
        fn = torch.vmap(fn, in_dims=tuple(dims))
    return fn


def native_vmap_error(
    case: OpCase, levels: Sequence[Sequence[int | None]], grad: bool
) -> BaseException | None:
    """What ``vmap(native)`` (``vmap(grad(native))`` with ``grad``), nested at ``levels``
    (in_dims, outermost first), raises on a batch of the sample; None: it works."""
    fn: Fn = case.fallback
    if grad:
        if not case.differentiable:
            return None
        fn = torch.func.grad(loss_of(case, case.fallback), argnums=case.diff_pos)
    try:
        _nested_vmap(fn, levels)(*_nested_batch(case, levels))
    except Exception as exc:  # the evidence is the raise itself
        return exc
    return None


def backward_under_vmap_error(case: OpCase, in_dims: Sequence[int | None]) -> BaseException | None:
    """What the generic backward (``torch.func.vjp`` of the native op) raises run under
    ``vmap`` at ``in_dims``, with a batched cotangent: the batched op's derived backward as
    docs/semantics.md says (vmap of the user's backward, the unbatched arguments as the sample
    itself); None: it works."""
    if not case.differentiable:
        return None
    from .build import with_diff

    outs = case.outputs(case.fallback(*case.args))
    cots = tuple(stacked(torch.ones_like(outs[k]), BATCH) for k in case.float_outputs)

    def backward(*a: Any) -> Any:
        full, cot = a[: len(case.args)], a[len(case.args) :]
        _, vjp_fn = torch.func.vjp(with_diff(case, full), *(full[i] for i in case.diff_pos))
        return vjp_fn(tuple(cot))

    dims = (*in_dims, *(0 for _ in cots))
    try:
        torch.vmap(backward, in_dims=dims)(*_batch_args(case, in_dims, BATCH), *cots)
    except Exception as exc:  # the evidence is the raise itself
        return exc
    return None


def native_vmap_vs_loop(case: OpCase, in_dims: Sequence[int | None]) -> str | None:
    """How ``vmap(native)`` at ``in_dims`` differs from the native op looped over the batch
    entries (None: they agree, or either raises)."""
    from opreg_testing import compare

    args = _batch_args(case, in_dims, BATCH)
    try:
        batched = torch.vmap(case.fallback, in_dims=tuple(in_dims))(*args)
        looped = _loop(case.fallback, in_dims=tuple(in_dims))(*args)
    except Exception:  # a raise is no evidence of a wrong value
        return None
    mismatch = compare(looped, batched)
    return None if mismatch is None else str(mismatch)


def applicable(case: OpCase) -> list[tuple[str, Transform]]:
    return [(n, t) for n, t in TRANSFORMS.items() if why_not(case, n) is None]
