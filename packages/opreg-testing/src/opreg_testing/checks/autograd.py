"""autograd check: gradcheck in float64, and ``grad(vmap(op))`` / ``vmap(grad(op))`` against
per-sample gradients.

Floating tensor arguments are converted to float64 (complex to complex128) and
differentiated; the scalar whose gradient is taken is a fixed random weighting of every
floating output, so every output element contributes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.autograd.gradcheck import GradcheckError

from opreg_core import SampleInput

from ..compare import Mismatch, Tolerance, compare_tensors
from ..report import CheckResult
from ..samples import SamplesArg, map_tensors
from ..target import OpLike
from ._batching import VmapCase, batched_sample, entry, stack_outputs
from ._common import CheckContext, Skip, prepare, run_public

#: Tolerance for comparing gradients computed two ways in float64.
GRAD_TOLERANCE = Tolerance(1e-6, 1e-8)


def _is_float(t: torch.Tensor) -> bool:
    return t.dtype.is_floating_point or t.dtype.is_complex


def _widen(t: torch.Tensor) -> torch.Tensor:
    if t.dtype.is_complex:
        return t.detach().to(torch.complex128)
    if t.dtype.is_floating_point:
        return t.detach().to(torch.float64)
    return t.detach()


def to_double(sample: SampleInput) -> SampleInput:
    """The sample with its floating tensors in float64 (complex in complex128)."""
    return SampleInput(
        map_tensors(_widen, sample.args), map_tensors(_widen, sample.kwargs), sample.name
    )


def diff_positions(sample: SampleInput) -> list[int]:
    """Positions of the floating tensor arguments (the ones differentiated)."""
    return [i for i, a in enumerate(sample.args) if isinstance(a, torch.Tensor) and _is_float(a)]


def _floating_outputs(out: Any) -> list[torch.Tensor]:
    items = out if isinstance(out, (tuple, list)) else (out,)
    found: list[torch.Tensor] = []
    for item in items:
        if isinstance(item, torch.Tensor) and _is_float(item):
            found.append(item)
        elif isinstance(item, (tuple, list)):
            found.extend(_floating_outputs(item))
    return found


def _loss(
    op: Callable[..., Any], kwargs: dict[str, Any], weights: list[torch.Tensor]
) -> Callable[..., Any]:
    """``sum(w * out)`` over the floating outputs: a scalar every output element reaches."""

    def loss(*args: Any) -> torch.Tensor:
        outs = _floating_outputs(op(*args, **kwargs))
        terms = [(o * w).real.sum() for o, w in zip(outs, weights, strict=True)]
        return torch.stack(terms).sum()

    return loss


def _weights(outs: list[torch.Tensor]) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1234)
    return [
        torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.device, o.dtype) for o in outs
    ]


def _gradcheck(ctx: CheckContext, sample: SampleInput, positions: list[int], fast: bool) -> None:
    op = ctx.target.call
    base = list(sample.args)

    def fn(*inputs: torch.Tensor) -> Any:
        args = list(base)
        for p, t in zip(positions, inputs, strict=True):
            args[p] = t
        return op(*args, **sample.kwargs)

    inputs = tuple(sample.args[p].clone().requires_grad_(True) for p in positions)
    case = "gradcheck, float64" + (", fast mode" if fast else "")
    with ctx.step("gradcheck", sample, case):
        try:
            torch.autograd.gradcheck(fn, inputs, fast_mode=fast, check_batched_grad=False)
        except GradcheckError as exc:
            names = [
                ctx.target.arg_names[p] if p < len(ctx.target.arg_names) else str(p)
                for p in positions
            ]
            found = jacobian_mismatch(fn, inputs, names)
            if found is None:
                raise ctx.failure(f"gradcheck failed: {exc}", sample, case) from exc
            problem = (
                "the backward disagrees with finite differences (gradcheck); "
                "expected = finite differences, actual = backward"
            )
            raise ctx.failure(problem, sample, case, mismatch=found) from exc


def _flat_outputs(out: Any) -> torch.Tensor:
    return torch.cat([o.reshape(-1) for o in _floating_outputs(out)])


def _backward_jacobian(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, rows: int
) -> torch.Tensor:
    """The Jacobian of flat ``fn`` at ``x`` from the backward, one row per output element."""
    x = x.detach().requires_grad_(True)
    out = fn(x)
    result = torch.zeros(rows, x.numel(), dtype=x.dtype, device=x.device)
    for i in range(rows):
        seed = torch.zeros_like(out)
        seed[i] = 1
        (grad,) = torch.autograd.grad(out, x, seed, retain_graph=True, allow_unused=True)
        if grad is not None:
            result[i] = grad.reshape(-1)
    return result


def jacobian_mismatch(
    fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], names: list[str], eps: float = 1e-6
) -> Mismatch | None:
    """The first Jacobian entry where the backward and central differences disagree.

    Uses gradcheck's tolerance (``atol=1e-5, rtol=1e-3``); only real inputs and outputs of at
    most 4096 elements are examined (otherwise None: the caller keeps gradcheck's message).
    """
    detached = [t.detach() for t in inputs]
    with torch.no_grad():
        reference = _flat_outputs(fn(*detached))
    if reference.is_complex() or any(t.is_complex() for t in detached):
        return None
    if reference.numel() * sum(t.numel() for t in detached) > 4096:
        return None
    tol = Tolerance(1e-3, 1e-5)
    for j, t in enumerate(detached):

        def at(x: torch.Tensor, j: int = j) -> torch.Tensor:
            return _flat_outputs(fn(*detached[:j], x, *detached[j + 1 :]))

        analytical = _backward_jacobian(at, t, reference.numel())
        columns = []
        for k in range(t.numel()):
            plus, minus = t.clone(), t.clone()
            plus.view(-1)[k] += eps
            minus.view(-1)[k] -= eps
            with torch.no_grad():
                columns.append((at(plus) - at(minus)) / (2 * eps))
        numerical = torch.stack(columns, 1) if columns else analytical
        where = f"Jacobian d(outputs)/d({names[j]}) [flat output index, flat input index]"
        found = compare_tensors(numerical, analytical, where, tol)
        if found is not None:
            return found
    return None


def _functorch(ctx: CheckContext, sample: SampleInput, positions: list[int]) -> None:
    """``vmap(grad(loss))`` and ``grad(sum of vmap(loss))`` equal stacked per-sample grads."""
    op = ctx.target.call
    with ctx.step("the op", sample, "float64"):
        outs = _floating_outputs(op(*sample.args, **sample.kwargs))
    if not outs:
        return
    loss = _loss(op, sample.kwargs, _weights(outs))
    argnums = tuple(positions)
    dims = tuple(0 if i in positions else None for i in range(len(sample.args)))
    case = VmapCase((dims,), (3,))
    batched = batched_sample(sample, case)
    grad = torch.func.grad
    with ctx.step("torch.func.grad(op) per batch entry", sample, "grad, float64"):
        expected = stack_outputs(
            [grad(loss, argnums)(*entry(sample, case, (i,)).args) for i in range(3)]
        )
    label = f"vmap(grad(op)), {case}"
    with ctx.step("vmap(grad(op))", sample, label):
        actual = torch.vmap(grad(loss, argnums), in_dims=dims)(*batched.args)
    ctx.assert_same(
        (expected, {}),
        (actual, {}),
        sample,
        label,
        "vmap(grad(op)) differs from per-sample gradients",
        GRAD_TOLERANCE,
    )

    def summed(*args: Any) -> torch.Tensor:
        total: torch.Tensor = torch.vmap(loss, in_dims=dims)(*args).sum()
        return total

    label = f"grad(vmap(op)), {case}"
    with ctx.step("grad(vmap(op))", sample, label):
        actual = grad(summed, argnums)(*batched.args)
    ctx.assert_same(
        (expected, {}),
        (actual, {}),
        sample,
        label,
        "grad(vmap(op)) differs from per-sample gradients",
        GRAD_TOLERANCE,
    )


def _needs_grad(ctx: CheckContext) -> None:
    """Skip ops that have no gradient to check."""
    op = ctx.target.opreg
    if op is not None:
        if not op.differentiable:
            raise Skip("the op is declared non-differentiable (differentiable=False)")
        if not op.has_backward:
            raise Skip("the op has no backward")
        return
    sample = to_double(ctx.samples[0])
    positions = diff_positions(sample)
    args = list(sample.args)
    for p in positions:
        args[p] = args[p].clone().requires_grad_(True)
    with ctx.step("the op with inputs that require grad", sample):
        outs = _floating_outputs(ctx.target.call(*args, **sample.kwargs))
    if not any(o.requires_grad for o in outs):
        raise Skip("the op's outputs do not require grad (no autograd formula)")


def run_autograd(
    ctx: CheckContext, *, functorch: bool = True, fast_mode: bool | None = None
) -> None:
    """The body of the autograd check (see :func:`check_autograd`)."""
    _needs_grad(ctx)
    checked = 0
    for original in ctx.samples:
        sample = to_double(original)
        positions = diff_positions(sample)
        if not positions:
            continue
        numel = sum(sample.args[p].numel() for p in positions)
        fast = numel > 64 if fast_mode is None else fast_mode
        _gradcheck(ctx, sample, positions, fast)
        if functorch:
            _functorch(ctx, sample, positions)
        checked += 1
    if not checked:
        raise Skip("no sample has a floating-point tensor argument to differentiate")
    ctx.info.update(samples=checked, functorch=functorch)


def check_autograd(
    op: OpLike,
    samples: SamplesArg = None,
    *,
    device: str | torch.device | None = None,
    functorch: bool = True,
    fast_mode: bool | None = None,
) -> CheckResult:
    """Check the op's gradients: ``torch.autograd.gradcheck`` in float64 on every sample, and
    (``functorch``) ``vmap(grad(op))`` and ``grad(vmap(op))`` against per-sample gradients.

    Skipped for ops declared non-differentiable or without a backward. ``fast_mode`` is passed
    to gradcheck (default: fast mode when the inputs have more than 64 elements). Raises
    :class:`CheckFailure`.
    """
    ctx = prepare("autograd", op, samples, device)
    return run_public(ctx, lambda c: run_autograd(c, functorch=functorch, fast_mode=fast_mode))
