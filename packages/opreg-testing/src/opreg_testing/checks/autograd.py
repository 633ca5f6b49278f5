"""autograd check: gradients in float64, first and second order, alone and under ``torch.func``.

For every sample (floating tensor arguments, and lists of them, converted to float64 or
complex128; the others kept):

1. ``torch.autograd.gradcheck``: the backward against finite differences; a mismatch names
   the first Jacobian entry that differs.
2. ``gradgradcheck`` (option ``gradgrad``, default on): the backward is itself differentiable
   and its derivative is right. A backward whose result does not require grad although its
   inputs do (it detaches, runs under ``no_grad``, goes through NumPy or calls a
   non-differentiable kernel such as a Triton launcher) fails with a message saying so,
   rather than passing with second derivatives that would silently be zero. A backward whose
   double backward raises a clear refusal (it calls an op registered without a backward, e.g.
   a Triton backward registered as its own op, or it is marked ``once_differentiable``: see
   :mod:`._declined`) is *once differentiable*: it passes, and the result says so
   (``notes``, ``info["once_differentiable"]``, ``info["declined"]``). Any other error of
   double backward fails.
3. ``vmap(grad(op))`` and ``grad(vmap(op))`` (option ``functorch``) against per-sample
   gradients: every tensor argument batched, each differentiated argument unbatched in turn
   (its gradient is then the sum over the batch), and (option ``nested``) two nested vmaps.
   A difference here while gradcheck passed means the backward is right for one sample but
   not under vmap; the message says what usually causes that.

The scalar whose gradient the ``torch.func`` part takes is a fixed random weighting of every
floating output, so every output element contributes.

Forward mode, for ops registered with a ``jvp`` (the steps above run for ops with a backward;
for an opreg op without a ``jvp``, forward mode is verified to raise opreg's clear error and
reported: ``info["forward_ad"]`` False, the error in ``info["declined"]``):

4. ``gradcheck(..., check_forward_ad=True)``: the jvp against finite differences; a mismatch
   names the first Jacobian entry that differs.
5. With a backward too: ``<jvp(v), u> == <v, vjp(u)>`` for random input tangents ``v`` and
   output gradients ``u`` (the jvp and the backward are transposes of one Jacobian).
6. (option ``functorch``) ``jvp(vmap(op))`` (the batched op's jvp, derived from the user's)
   and ``vmap(jvp(op))`` against per-sample tangents, on the same batch cases as step 3.

On a device where a kernel serves the op (a Triton kernel, a ``register_kernel`` kernel) that
computes below float64 (e.g. in float32, as Triton kernels do; found by comparing it with the
fallback on the float64 samples: :mod:`._kernel_precision`), finite differences through it
are meaningless: steps 1 to 6 run on the fallbacks in float64 instead, and the derivatives
through the kernels (the backward, which may launch a backward op's kernel, and the jvp) are
compared with the fallbacks' at that precision's tolerance (``info["kernel_precision"]``,
``info["finite_differences_on"]`` and a note say so).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

import torch
from torch.autograd.gradcheck import GradcheckError

from opreg_core import SampleInput

from .._private import tree_leaves
from ..compare import Mismatch, Tolerance, compare, compare_tensors, tolerance_for
from ..errors import CheckFailure
from ..report import CheckResult
from ..samples import SamplesArg, map_tensors
from ..target import OpLike
from ._consumed_inputs import CONSUMING_BACKWARD, check_vjp_on_fresh_inputs, consumed_inputs
from ._declined import TORCH_ONCE_DIFFERENTIABLE, declined
from ._gradcheck_text import condense, is_jacobian_mismatch
from ._harness import Budget, Check, CheckContext, Skip
from ._kernel_precision import (
    FallbackPath,
    dtype_name,
    fallback_path,
    kernel_precision,
    kernel_served,
    kernel_words,
)
from ._outputs import floating_outputs, is_float, random_like, weighted_sum
from ._vmap_cases import (
    Entries,
    Level,
    VmapCase,
    batch_entries,
    batchable,
    batched_sample,
    check_batch_entries,
    entry,
    expected_output,
    stack_outputs,
    vmapped,
)

#: Tolerance for comparing gradients computed two ways in float64.
GRAD_TOLERANCE = Tolerance(1e-6, 1e-8)

#: How to turn the second-order part off, quoted in the failure that it raises.
GRADGRAD_OPT_OUT = (
    "opt out with check_autograd(op, gradgrad=False) or "
    'check_op(op, options={"autograd": {"gradgrad": False}})'
)

#: Why grad(vmap(op)) or vmap(grad(op)) can differ from per-sample gradients when gradcheck
#: passed (it always ran first).
VMAP_HINT = (
    "gradcheck passed, so the backward is right for one sample but not under vmap: it may mix "
    "batch entries (a reduction over all dims instead of per sample), return a gradient with "
    "the wrong shape for a broadcast input, or use a saved tensor from setup_context "
    "incorrectly (if the vmap check fails too, fix vmap_fn first)"
)

#: Why torch.func.grad(op) can fail on one sample when .backward() works (gradcheck passed).
FUNC_GRAD_HINT = (
    "gradcheck (plain .backward()) passed, so the backward fails only under torch.func "
    "transforms, whose tensors are wrappers: it may call .item(), .numpy(), .tolist() or "
    "data_ptr() on one of them, e.g. by calling a Triton launcher directly instead of "
    "through a registered op"
)


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


def _float_list(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple))
        and bool(value)
        and all(isinstance(v, torch.Tensor) and is_float(v) for v in value)
    )


def diff_positions(sample: SampleInput) -> list[int]:
    """Positions of the differentiated arguments: floating tensors and lists of them."""
    return [
        i
        for i, a in enumerate(sample.args)
        if (isinstance(a, torch.Tensor) and is_float(a)) or _float_list(a)
    ]


@dataclass(frozen=True)
class Inputs:
    """The differentiated tensors of a sample as one flat tuple (list arguments spread out),
    and how to put them back into the op's arguments."""

    sample: SampleInput
    positions: tuple[int, ...]

    def flat(self) -> tuple[torch.Tensor, ...]:
        found: list[torch.Tensor] = []
        for p in self.positions:
            value = self.sample.args[p]
            found.extend(value if isinstance(value, (list, tuple)) else [value])
        return tuple(found)

    def names(self, arg_names: Sequence[str]) -> list[str]:
        names: list[str] = []
        for p in self.positions:
            name = arg_names[p] if p < len(arg_names) else f"argument {p}"
            value = self.sample.args[p]
            if isinstance(value, (list, tuple)):
                names.extend(f"{name}[{k}]" for k in range(len(value)))
            else:
                names.append(name)
        return names

    def args(self, flat: Sequence[torch.Tensor]) -> list[Any]:
        args = list(self.sample.args)
        it = iter(flat)
        for p in self.positions:
            value = args[p]
            if isinstance(value, (list, tuple)):
                args[p] = [next(it) for _ in value]
            else:
                args[p] = next(it)
        return args

    def function(self, op: Callable[..., Any]) -> Callable[..., Any]:
        """The op as a function of the flat differentiated tensors."""

        def fn(*flat: torch.Tensor) -> Any:
            out = op(*self.args(flat), **self.sample.kwargs)
            if isinstance(out, tuple):  # plain outputs (an int...) have no derivative
                return tuple(o for o in out if isinstance(o, (torch.Tensor, list)))
            return out

        return fn

    def fresh(self) -> tuple[torch.Tensor, ...]:
        return tuple(t.detach().clone().requires_grad_(True) for t in self.flat())


def _loss(
    op: Callable[..., Any], kwargs: dict[str, Any], weights: list[torch.Tensor]
) -> Callable[..., Any]:
    """``sum(w * out)`` over the floating outputs: a scalar every output element reaches."""

    def loss(*args: Any) -> torch.Tensor:
        return weighted_sum(floating_outputs(op(*args, **kwargs)), weights)

    return loss


def _weights(outs: list[torch.Tensor]) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1234)
    return [
        torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.device, o.dtype) for o in outs
    ]


# -- first order ---------------------------------------------------------------------------------


def _consuming_backward(ctx: CheckContext, inputs: Inputs) -> bool:
    """Whether the backward writes its gradients into its saved inputs (see
    :mod:`._consumed_inputs`); if so, check it on fresh inputs per forward here. A write that
    autograd does not see (no version bump) fails."""
    fn = inputs.function(ctx.target.call)
    sample = inputs.sample
    names = inputs.names(ctx.target.arg_names)
    with ctx.step("the backward", sample, "backward, float64"):
        found = consumed_inputs(fn, inputs.fresh(), names)
    if found is None:
        return False
    case = "the backward writes into its saved inputs"
    if found.undeclared:
        which = ", ".join(repr(n) for n in found.undeclared)
        raise ctx.failure(
            f"the backward writes into the input(s) {which} without autograd seeing it (their "
            "version counter did not change: e.g. a Triton kernel writing through pointers in "
            "an op that does not declare the write), so autograd cannot refuse a second "
            "backward through the same graph and torch.compile does not know about the write. "
            "Declare it: register the op that writes with mutates_args naming that argument "
            "(opreg bumps the version counter), or write the gradient into a new tensor",
            sample,
            case,
        )
    with ctx.step("the backward against finite differences, a fresh forward each", sample, case):
        mismatch = check_vjp_on_fresh_inputs(fn, inputs.flat())
    if mismatch is not None:
        raise ctx.failure(
            "the backward disagrees with finite differences (each gradient taken on a fresh "
            "forward, as the backward writes into its saved inputs); expected = finite "
            "differences, actual = backward",
            sample,
            case,
            mismatch=mismatch,
        )
    ctx.info["consumes_saved_inputs"] = list(found.names)
    return True


def _gradcheck(ctx: CheckContext, inputs: Inputs, fast: bool) -> None:
    fn = inputs.function(ctx.target.call)
    sample = inputs.sample
    case = "gradcheck, float64" + (", fast mode" if fast else "")
    with ctx.step("gradcheck", sample, case):
        try:
            torch.autograd.gradcheck(fn, inputs.fresh(), fast_mode=fast, check_batched_grad=False)
        except GradcheckError as exc:
            names = inputs.names(ctx.target.arg_names)
            found = jacobian_mismatch(fn, inputs.fresh(), names)
            problem = (
                "the backward disagrees with finite differences (gradcheck); "
                "expected = finite differences, actual = backward"
            )
            if found is None:
                if not is_jacobian_mismatch(exc):
                    problem = "gradcheck failed"
                summary = condense(exc, names, _sizes(fn, inputs))
                raise ctx.failure(f"{problem}: {summary}", sample, case) from exc
            raise ctx.failure(problem, sample, case, mismatch=found) from exc


def _sizes(fn: Callable[..., Any], inputs: Inputs) -> tuple[list[int], list[int]] | None:
    """The flat sizes of the differentiated inputs and of the differentiable outputs, as
    gradcheck numbers them (None if the op raises)."""
    xs = inputs.fresh()
    try:
        outs = fn(*xs)
    except Exception:  # only to place entries in a failure message
        return None
    outs = outs if isinstance(outs, tuple) else (outs,)
    diff = [o.numel() for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
    return [x.numel() for x in xs], diff


def _flat_outputs(out: Any) -> torch.Tensor:
    return torch.cat([o.reshape(-1) for o in floating_outputs(out)])


def _backward_jacobian(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, rows: int
) -> torch.Tensor:
    """The Jacobian of flat ``fn`` at ``x`` from the backward, one row per output element."""
    x = x.detach().requires_grad_(True)
    out = fn(x)
    result = torch.zeros(rows, x.numel(), dtype=x.dtype, device=x.device)
    if not out.requires_grad:  # cut off the graph: autograd's derivative is zero
        return result
    for i in range(rows):
        seed = torch.zeros_like(out)
        seed[i] = 1
        (grad,) = torch.autograd.grad(out, x, seed, retain_graph=True, allow_unused=True)
        if grad is not None:
            result[i] = grad.reshape(-1)
    return result


def jacobian_mismatch(
    fn: Callable[..., Any],
    inputs: tuple[torch.Tensor, ...],
    names: list[str],
    eps: float = 1e-6,
    analytical: Callable[..., torch.Tensor] = _backward_jacobian,
) -> Mismatch | None:
    """The first Jacobian entry where the backward (or ``analytical``, e.g. the jvp's
    Jacobian) and central differences disagree.

    Uses gradcheck's tolerance (``atol=1e-5, rtol=1e-3``); only real inputs and outputs of at
    most 4096 elements are examined (otherwise None: the caller condenses gradcheck's
    message, :mod:`._gradcheck_text`).
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

        derived = analytical(at, t, reference.numel())
        columns = []
        for k in range(t.numel()):
            plus, minus = t.clone(), t.clone()
            plus.view(-1)[k] += eps
            minus.view(-1)[k] -= eps
            with torch.no_grad():
                columns.append((at(plus) - at(minus)) / (2 * eps))
        numerical = torch.stack(columns, 1) if columns else derived
        where = f"Jacobian d(outputs)/d({names[j]}) [flat output index, flat input index]"
        found = compare_tensors(numerical, derived, where, tol)
        if found is not None:
            return found
    return None


# -- forward mode ----------------------------------------------------------------------------------

#: Why jvp(vmap(op)) or vmap(jvp(op)) can differ from per-sample tangents when the forward
#: gradcheck passed (it always ran first).
JVP_VMAP_HINT = (
    "gradcheck with forward AD passed, so the jvp is right for one sample but not under vmap "
    "(the batched op's jvp replays it per sample): it may mix batch entries, or use a saved "
    "tensor from setup_context incorrectly (if the vmap check fails too, fix vmap_fn first)"
)


def _forward_jacobian(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, rows: int
) -> torch.Tensor:
    """The Jacobian of flat ``fn`` at ``x`` from the jvp, one column per input element."""
    x = x.detach()
    columns = []
    for k in range(x.numel()):
        basis = torch.zeros_like(x)
        basis.view(-1)[k] = 1
        columns.append(torch.func.jvp(fn, (x,), (basis,))[1])
    if not columns:
        return torch.zeros(rows, 0, dtype=x.dtype, device=x.device)
    return torch.stack(columns, 1)


def _forward_gradcheck(ctx: CheckContext, inputs: Inputs, fast: bool) -> None:
    fn = inputs.function(ctx.target.call)
    sample = inputs.sample
    case = "gradcheck with check_forward_ad=True, float64" + (", fast mode" if fast else "")
    with ctx.step("gradcheck (forward AD)", sample, case):
        try:
            torch.autograd.gradcheck(
                fn,
                inputs.fresh(),
                fast_mode=fast,
                check_forward_ad=True,
                check_backward_ad=False,
                check_undefined_grad=False,
                check_batched_grad=False,
            )
        except GradcheckError as exc:
            names = inputs.names(ctx.target.arg_names)
            found = jacobian_mismatch(fn, inputs.fresh(), names, analytical=_forward_jacobian)
            problem = "the jvp disagrees with finite differences (gradcheck with forward AD)"
            if found is None:
                if not is_jacobian_mismatch(exc):
                    problem = "gradcheck with forward AD failed"
                summary = condense(exc, names, _sizes(fn, inputs))
                raise ctx.failure(f"{problem}: {summary}", sample, case) from exc
            problem += "; expected = finite differences, actual = jvp"
            raise ctx.failure(problem, sample, case, mismatch=found) from exc


def _tangent_for(x: torch.Tensor) -> torch.Tensor:
    """A tangent that is an element-wise function of its primal, so the tangent of a batch
    entry is the entry of the batch's tangent."""
    return torch.sin(3 * x) + 0.5


def _jvp_matches_backward(ctx: CheckContext, inputs: Inputs) -> None:
    """``<jvp(v), u> == <v, vjp(u)>``: the jvp and the backward are one Jacobian's transposes."""
    sample = inputs.sample
    xs = tuple(t.detach() for t in inputs.flat())
    if any(x.is_complex() for x in xs):
        return  # the identity needs conjugations that differ between conventions
    fn = inputs.function(ctx.target.call)
    g = torch.Generator().manual_seed(2468)
    vs = tuple(random_like(x, g) for x in xs)
    case = "jvp against the backward, float64"
    with ctx.step("torch.func.jvp(op)", sample, case):
        result = torch.func.jvp(lambda *a: _flat_outputs(fn(*a)), xs, vs)
        out, tangent = result[0], result[1]
    if out.is_complex():
        return
    u = random_like(out, g)
    with ctx.step("the backward", sample, case):
        fresh = inputs.fresh()
        flat = _flat_outputs(fn(*fresh))
        grads = torch.autograd.grad(flat, fresh, u, allow_unused=True) if flat.requires_grad else ()
    forward = float((tangent * u).sum())
    backward = sum(
        float((gr * v).sum()) for gr, v in zip(grads, vs, strict=False) if gr is not None
    )
    if abs(forward - backward) <= 1e-6 * (abs(forward) + abs(backward)) + 1e-8:
        return
    raise ctx.failure(
        f"the jvp and the backward disagree: <jvp(v), u> = {forward:.10g} but "
        f"<v, vjp(u)> = {backward:.10g} for random input tangents v and output gradients u; "
        "they are transposes of one Jacobian, so one of them is wrong (a sign, a scale, a "
        "missing term, or the tangents of two arguments swapped)",
        sample,
        case,
    )


def _jvp_outputs(
    op: Callable[..., Any], kwargs: dict[str, Any], positions: Sequence[int]
) -> Callable[..., Any]:
    """``(*args) -> tangents of the floating outputs`` for the tangents :func:`_tangent_for`
    gives the differentiated arguments."""

    def tangents(*args: Any) -> Any:
        primals = tuple(args[p] for p in positions)

        def fn(*diff: Any) -> tuple[torch.Tensor, ...]:
            call = list(args)
            for p, value in zip(positions, diff, strict=True):
                call[p] = value
            return tuple(floating_outputs(op(*call, **kwargs)))

        directions = tuple(map_tensors(_tangent_for, p) for p in primals)
        return torch.func.jvp(fn, primals, directions)[1]

    return tangents


def _forward_functorch(
    ctx: CheckContext, sample: SampleInput, positions: list[int], entries: Entries, nested: bool
) -> int:
    """``jvp(vmap(op))`` and ``vmap(jvp(op))`` against per-sample tangents."""
    op = ctx.target.call
    arg_names = ctx.target.arg_names
    mutated = {arg_names.index(n) for n in ctx.target.mutated_args if n in arg_names}
    cases = [
        c
        for c in functorch_cases(sample, positions, entries, nested)
        if all(lvl[p] is not None for lvl in c.levels for p in mutated)
    ]
    per_sample = _jvp_outputs(op, sample.kwargs, positions)

    def per_entry(*args: Any, **kwargs: Any) -> Any:
        return per_sample(*args)  # the keyword arguments are bound in per_sample

    for case in cases:
        with ctx.step("torch.func.jvp(op) per batch entry", sample, "jvp, float64"):
            expected = expected_output(per_entry, sample, case)
        batched = batched_sample(sample, case)
        label = f"jvp(vmap(op)), {case}"
        with ctx.step("jvp(vmap(op))", sample, label, JVP_VMAP_HINT):
            op_vmapped = vmapped(op, case, sample.kwargs, "error", ctx.target.output_batch_dims)
            actual = _jvp_outputs(op_vmapped, {}, positions)(*batched.args)
        _compare_tangents(ctx, expected, actual, sample, label)
        label = f"vmap(jvp(op)), {case}"
        with ctx.step("vmap(jvp(op))", sample, label, JVP_VMAP_HINT):
            actual = vmapped(per_sample, case, {}, "error")(*batched.args)
        _compare_tangents(ctx, expected, actual, sample, label)
    return len(cases)


def _compare_tangents(
    ctx: CheckContext, expected: Any, actual: Any, sample: SampleInput, label: str
) -> None:
    found = compare(expected, actual, tolerance=GRAD_TOLERANCE)
    if found is not None:
        what = label.split(",")[0]
        raise ctx.failure(
            f"{what} differs from per-sample tangents ({JVP_VMAP_HINT})",
            sample,
            label,
            mismatch=found,
        )


# -- the kernel's derivatives against the fallback's -------------------------------------------

#: Why the kernel's derivatives can differ from the fallback's when finite differences passed.
KERNEL_DERIVATIVE_HINT = (
    "finite differences passed on the fallbacks, so the derivative formula is right but the "
    "kernel path computes it wrongly: a Triton backward kernel (a backward op's kernel) that "
    "drops or scales a term, or a backward that uses something only the kernel's forward "
    "saves; expected = the fallbacks' derivative, actual = the kernel's"
)


def _vjp(inputs: Inputs, fn: Callable[..., Any]) -> tuple[torch.Tensor, ...]:
    """The gradients of every input for fixed random output gradients (zeros where none)."""
    xs = inputs.fresh()
    outs = [o for o in floating_outputs(fn(*xs)) if o.requires_grad]
    if not outs:
        return tuple(torch.zeros_like(x) for x in xs)
    grads = torch.autograd.grad(outs, xs, _weights(outs), allow_unused=True)
    return tuple(torch.zeros_like(x) if g is None else g for x, g in zip(xs, grads, strict=True))


def _jvp(inputs: Inputs, fn: Callable[..., Any]) -> list[torch.Tensor]:
    """The tangents of the floating outputs for fixed random input tangents."""
    xs = tuple(t.detach() for t in inputs.flat())
    g = torch.Generator().manual_seed(2468)
    vs = tuple(random_like(x, g) for x in xs)
    return list(torch.func.jvp(lambda *a: tuple(floating_outputs(fn(*a))), xs, vs)[1])


def _kernel_derivatives(
    ctx: CheckContext,
    kernel: Inputs,
    fallback: Inputs,
    path: FallbackPath,
    precision: torch.dtype,
    backward: bool,
    forward: bool,
) -> None:
    """The kernel's vjp (its backward, which may launch kernels of its own through a backward
    op) and jvp against the fallbacks' at the same float64 inputs, at ``precision``'s
    tolerance (the kernel computes at ``precision``)."""
    tol = tolerance_for(precision, ctx.tolerance)
    names = kernel.names(ctx.target.arg_names)
    sample = kernel.sample
    label, words = dtype_name(precision), kernel_words(ctx)
    modes: list[tuple[str, Callable[[Inputs, Callable[..., Any]], Any]]] = []
    if backward:
        modes.append(("backward (vjp)", _vjp))
    if forward:
        modes.append(("jvp", _jvp))
    for what, derive in modes:
        case = f"{what}: {words} vs the fallbacks, float64 inputs, {label} tolerance"
        with ctx.step(f"the {what} on the fallbacks", sample, case), path.serving():
            expected = derive(fallback, fallback.function(ctx.target.call))
        with ctx.step(f"the {what} on the kernel", sample, case):
            actual = derive(kernel, kernel.function(ctx.target.call))
        where = (
            [f"the gradient of {n}" for n in names]
            if what != "jvp"
            else [f"the tangent of output {i}" for i in range(len(actual))]
        )
        for name, e, a in zip(where, expected, actual, strict=True):
            found = compare_tensors(e.to(a.device), a, name, tol)
            if found is not None:
                raise ctx.failure(
                    f"the {what} through {words} differs from the fallbacks' "
                    f"({KERNEL_DERIVATIVE_HINT})",
                    sample,
                    case,
                    mismatch=found,
                )


# -- second order --------------------------------------------------------------------------------


def _first_order(fn: Callable[..., Any], count: int) -> Callable[..., Any]:
    """``(*inputs, *grad_outputs) -> gradients``: the backward as a differentiable function."""

    def gradients(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        xs, vs = args[:count], args[count:]
        with torch.enable_grad():
            xs = tuple(x if x.requires_grad else x.detach().requires_grad_(True) for x in xs)
            outs = [o for o in floating_outputs(fn(*xs)) if o.requires_grad]
            grads = torch.autograd.grad(outs, xs, vs, create_graph=True, allow_unused=True)
        return tuple(
            torch.zeros_like(x) if g is None else g for x, g in zip(xs, grads, strict=True)
        )

    return gradients


def _first_order_graph(fn: Callable[..., Any], xs: tuple[torch.Tensor, ...]) -> tuple[Any, ...]:
    """The first-order gradients of ``fn``'s floating outputs (weighted by random output
    gradients that require grad) with respect to ``xs``, with ``create_graph=True``; None for
    an input that gets no gradient."""
    outs = [o for o in floating_outputs(fn(*xs)) if o.requires_grad]
    if not outs:
        return (None,) * len(xs)
    g = torch.Generator().manual_seed(4321)
    vs = [
        torch.randn(o.shape, generator=g, dtype=torch.float64)
        .to(o.device, o.dtype)
        .requires_grad_(True)
        for o in outs
    ]
    return torch.autograd.grad(outs, xs, vs, create_graph=True, allow_unused=True)


def _not_differentiable(grads: Sequence[Any], names: list[str]) -> list[str]:
    """The inputs whose first-order gradient is nonzero but does not require grad, although the
    inputs and the output gradients do: the backward cut it off the graph."""
    return [
        name
        for name, grad in zip(names, grads, strict=True)
        if grad is not None and not grad.requires_grad and bool(grad.ne(0).any())
    ]


def _double_backward_declined(grads: Sequence[Any]) -> str | None:
    """Run double backward through every first-order gradient that requires grad; the clear
    refusal it raised (see :mod:`._declined`), or None if it ran. Any other error propagates.

    ``.backward()`` without ``inputs`` runs every node of the graph, as a user's double
    backward does: ``torch.autograd.grad`` with respect to the inputs would skip the node that
    ``once_differentiable`` adds, and see zeros where torch raises.
    """
    live = [g for g in grads if isinstance(g, torch.Tensor) and g.requires_grad]
    if not live:
        return None
    gen = torch.Generator().manual_seed(8642)
    total = torch.stack(
        [
            (g * torch.randn(g.shape, generator=gen, dtype=torch.float64).to(g.device)).real.sum()
            for g in live
        ]
    ).sum()
    try:
        torch.autograd.backward(total)
    except Exception as exc:
        reason = declined(exc, "reverse")
        if reason is None:
            raise
        return reason
    return None


#: Why double backward can raise an error other than a clear refusal.
DOUBLE_BACKWARD_HINT = (
    "the backward's own backward failed, e.g. the backward calls an op whose backward is broken "
    "(only opreg's NotDifferentiableError, from an op registered without a backward, and "
    "torch's once_differentiable error count as declining second derivatives clearly)"
)


def _gradgradcheck(ctx: CheckContext, inputs: Inputs, fast: bool) -> str | None:
    """Second derivatives of one sample: None when gradgradcheck passed; the clear error when
    double backward is declined (the op is once differentiable). Raises a failure otherwise."""
    fn = inputs.function(ctx.target.call)
    sample = inputs.sample
    names = inputs.names(ctx.target.arg_names)
    case = "gradgradcheck, float64" + (", fast mode" if fast else "")
    with ctx.step("the backward with create_graph=True", sample, case):
        grads = _first_order_graph(fn, inputs.fresh())
        cut = _not_differentiable(grads, names)
    if cut:
        which = ", ".join(cut)
        raise ctx.failure(
            f"the backward is not differentiable: the gradient it returns for {which} does not "
            "require grad (no grad_fn) although the inputs and the output gradients do, so "
            "second derivatives (double backward, torch.func.hessian, gradgradcheck) would be "
            "silently zero. It may detach, run under torch.no_grad(), go through NumPy or call "
            "a non-differentiable kernel (e.g. a Triton launcher or an op declared "
            "differentiable=False); build it from differentiable operations or ops that have "
            f"their own backward, or {GRADGRAD_OPT_OUT}",
            sample,
            case,
        )
    with ctx.step("double backward", sample, case, DOUBLE_BACKWARD_HINT):
        refusal = _double_backward_declined(grads)
    if refusal is not None:
        return refusal
    with ctx.step("gradgradcheck", sample, case, DOUBLE_BACKWARD_HINT):
        try:
            torch.autograd.gradgradcheck(
                fn, inputs.fresh(), fast_mode=fast, check_batched_grad=False
            )
        except GradcheckError as exc:
            xs = inputs.fresh()
            outs = [o for o in floating_outputs(fn(*xs)) if o.requires_grad]
            g = torch.Generator().manual_seed(4321)
            vs = tuple(torch.randn(o.shape, generator=g, dtype=o.dtype).to(o.device) for o in outs)
            vnames = [f"grad_output {i}" for i in range(len(vs))]
            found = jacobian_mismatch(_first_order(fn, len(xs)), (*xs, *vs), names + vnames)
            problem = (
                "the backward's own derivative (the second derivative) disagrees with finite "
                "differences of the backward (gradgradcheck): the backward is differentiable "
                "but not correctly, e.g. it detaches part of its computation or calls an op "
                f"whose backward is wrong; {GRADGRAD_OPT_OUT}"
            )
            if found is None:
                summary = condense(exc, names + vnames).replace("d(output ", "d(gradient ", 1)
                raise ctx.failure(f"{problem}\n{summary}", sample, case) from exc
            found = dataclasses.replace(
                found, where=found.where.replace("d(outputs)", "d(gradients)", 1)
            )
            raise ctx.failure(
                problem + "; expected = finite differences, actual = double backward",
                sample,
                case,
                mismatch=found,
            ) from exc
        except Exception as exc:  # a refusal the probe above did not reach: still declined
            refusal = declined(exc, "reverse")
            if refusal is None:
                raise
            return refusal
    return None


# -- torch.func ----------------------------------------------------------------------------------


def functorch_cases(
    sample: SampleInput, positions: Sequence[int], entries: Entries, nested: bool
) -> list[VmapCase]:
    """Every batchable argument batched at 0; each differentiated one unbatched in turn (when
    another argument stays batched); with ``nested``, two levels batching everything."""
    batched = batchable(sample)
    n = len(sample.args)
    everything: Level = tuple(0 if i in batched else None for i in range(n))
    levels: list[tuple[Level, ...]] = [(everything,)]
    for p in positions:
        if any(q != p for q in batched):
            levels.append((tuple(None if i == p else d for i, d in enumerate(everything)),))
    cases = [VmapCase(lv, (3,), entries) for lv in levels]
    if nested:
        cases.append(VmapCase((everything, everything), (2, 3), entries))
    return cases


def _add(a: Any, b: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return a + b
    return type(a)(_add(x, y) for x, y in zip(a, b, strict=True))


def _grad_of_vmap_expected(
    per_entry: dict[tuple[int, ...], tuple[Any, ...]], case: VmapCase, argnums: tuple[int, ...]
) -> tuple[Any, ...]:
    """Per-entry gradients arranged as ``grad(sum of vmap(loss))`` returns them: stacked at 0
    over the levels that batch the argument, summed over the levels that do not."""

    def gather(depth: int, index: tuple[int, ...], k: int) -> Any:
        if depth == case.depth:
            return per_entry[index][k]
        parts = [gather(depth + 1, (*index, i), k) for i in range(case.sizes[depth])]
        if case.levels[depth][argnums[k]] is None:
            total = parts[0]
            for part in parts[1:]:
                total = _add(total, part)
            return total
        return stack_outputs(parts)

    return tuple(gather(0, (), k) for k in range(len(argnums)))


def _batch_sum(expected: Any, actual: Any, depth: int) -> bool:
    """Whether ``actual`` is, for every batch entry, ``expected`` summed over the batch dims."""
    pairs = list(zip(tree_leaves(expected), tree_leaves(actual), strict=False))
    if not pairs:
        return False
    for e, a in pairs:
        if not isinstance(e, torch.Tensor) or not isinstance(a, torch.Tensor):
            return False
        if e.shape != a.shape or e.dim() < depth:
            return False
        dims = tuple(range(depth))
        summed = e.sum(dims, keepdim=True).expand_as(e)
        if not torch.allclose(a, summed, rtol=1e-6, atol=1e-8):
            return False
    return True


def _compare_grads(
    ctx: CheckContext,
    expected: Any,
    actual: Any,
    sample: SampleInput,
    label: str,
    what: str,
    summed_depth: int | None,
) -> None:
    found = compare(expected, actual, tolerance=GRAD_TOLERANCE)
    if found is None:
        return
    hint = VMAP_HINT
    if summed_depth is not None and _batch_sum(expected, actual, summed_depth):
        hint = (
            "each batch entry got the sum of the per-sample gradients over the whole batch: "
            "something reduces over the batch dim (e.g. a gradient summed over all leading "
            "dims instead of per sample); " + VMAP_HINT
        )
    raise ctx.failure(
        f"{what} differs from per-sample gradients ({hint})", sample, label, mismatch=found
    )


def _functorch_case(
    ctx: CheckContext,
    sample: SampleInput,
    case: VmapCase,
    loss: Callable[..., torch.Tensor],
    argnums: tuple[int, ...],
) -> None:
    grad = torch.func.grad
    per_sample_grad = grad(loss, argnums)

    def per_entry(*args: Any, **kwargs: Any) -> Any:
        return per_sample_grad(*args)

    with ctx.step("torch.func.grad(op) per batch entry", sample, "grad, float64", FUNC_GRAD_HINT):
        expected = expected_output(per_entry, sample, case)
        entries = {
            index: per_entry(*entry(sample, case, index).args)
            for index in itertools.product(*(range(s) for s in case.sizes))
        }
    batched = batched_sample(sample, case)

    label = f"vmap(grad(op)), {case}"
    with ctx.step("vmap(grad(op))", sample, label, VMAP_HINT):
        actual = vmapped(per_sample_grad, case, {}, "error")(*batched.args)
    _compare_grads(ctx, expected, actual, sample, label, "vmap(grad(op))", case.depth)

    vmapped_loss = vmapped(loss, case, {}, "error")

    def summed(*args: Any) -> torch.Tensor:
        total: torch.Tensor = vmapped_loss(*args).sum()
        return total

    label = f"grad(vmap(op)), {case}"
    with ctx.step("grad(vmap(op))", sample, label, VMAP_HINT):
        actual = grad(summed, argnums)(*batched.args)
    expected = _grad_of_vmap_expected(entries, case, argnums)
    everywhere = all(all(lvl[p] is not None for lvl in case.levels) for p in argnums)
    _compare_grads(
        ctx, expected, actual, sample, label, "grad(vmap(op))", case.depth if everywhere else None
    )


def _functorch(
    ctx: CheckContext, sample: SampleInput, positions: list[int], entries: Entries, nested: bool
) -> int:
    """``vmap(grad(loss))`` and ``grad(sum of vmap(loss))`` against per-sample gradients."""
    op = ctx.target.call
    with ctx.step("the op", sample, "float64"):
        outs = floating_outputs(op(*sample.args, **sample.kwargs))
    if not outs:
        return 0
    loss = _loss(op, sample.kwargs, _weights(outs))
    arg_names = ctx.target.arg_names
    mutated = {arg_names.index(n) for n in ctx.target.mutated_args if n in arg_names}
    cases = [
        c
        for c in functorch_cases(sample, positions, entries, nested)
        if all(lvl[p] is not None for lvl in c.levels for p in mutated)
    ]
    for case in cases:
        _functorch_case(ctx, sample, case, loss, tuple(positions))
    return len(cases)


# -- declined derivatives ------------------------------------------------------------------------

#: What the note of a backward marked ``torch.autograd.function.once_differentiable`` adds:
#: torch's decorator raises only where autograd runs its error node (``.backward()``).
TORCH_ONCE_DIFFERENTIABLE_CAVEAT = (
    "torch.func transforms (grad of grad, jacrev of jacrev, hessian) get zeros through "
    "torch's decorator instead of an error; a backward that calls an op registered without a "
    "backward raises under every transform"
)

#: ``info["declined"]`` keys: what the op declines with a clear error (see :mod:`._declined`).
DOUBLE_BACKWARD = "double backward"
FORWARD_AD = "forward-mode AD"


def _forward_declined(ctx: CheckContext, inputs: Inputs) -> str:
    """For an opreg op with no jvp: forward-mode AD through it must raise opreg's clear error
    (its tangent would otherwise be lost); returns that error's first sentence."""
    sample = inputs.sample
    fn = inputs.function(ctx.target.call)
    xs = tuple(t.detach() for t in inputs.flat())
    case = "torch.func.jvp, float64 (the op has no jvp)"
    with ctx.step("torch.func.jvp(op)", sample, case):
        try:
            torch.func.jvp(fn, xs, tuple(torch.ones_like(x) for x in xs))
        except Exception as exc:
            refusal = declined(exc, "forward")
            if refusal is None:
                raise
            return refusal
    raise ctx.failure(
        "torch.func.jvp(op) returned although the op was registered without a jvp: forward-mode "
        "AD must raise opreg's NotDifferentiableError, not lose the tangent",
        sample,
        case,
    )


# -- the check -----------------------------------------------------------------------------------


def _needs_grad(ctx: CheckContext) -> None:
    """Skip ops that have no gradient to check."""
    op = ctx.target.opreg
    if op is not None:
        if not op.differentiable:
            raise Skip("the op is declared non-differentiable (differentiable=False)")
        if not op.has_backward and not op.has_jvp:
            raise Skip("the op has no backward")
        return
    sample = to_double(ctx.samples[0])
    inputs = Inputs(sample, tuple(diff_positions(sample)))
    with ctx.step("the op with inputs that require grad", sample):
        outs = floating_outputs(inputs.function(ctx.target.call)(*inputs.fresh()))
    if not any(o.requires_grad for o in outs):
        raise Skip("the op's outputs do not require grad (no autograd formula)")


class AutogradOptions(TypedDict, total=False):
    """The autograd check's options: keywords of :func:`check_autograd`, ``check_op``'s
    ``options["autograd"]`` (defaults in :data:`AUTOGRAD`)."""

    functorch: bool  #: also ``vmap(grad(op))``, ``grad(vmap(op))`` (and the jvp ones)
    fast_mode: bool | None  #: the gradchecks' ``fast_mode`` (None: by input size)
    gradgrad: bool  #: also ``gradgradcheck``
    nested: bool  #: also two nested vmaps
    batch_entries: str  #: how batch entries are built (one of ``BATCH_ENTRIES``)


def _validate(options: AutogradOptions) -> None:
    check_batch_entries(options["batch_entries"])


def run_autograd(ctx: CheckContext, options: AutogradOptions) -> None:
    """The body of the autograd check (see :func:`check_autograd`)."""
    functorch, fast_mode = options["functorch"], options["fast_mode"]
    _needs_grad(ctx)
    op = ctx.target.opreg
    backward = op is None or op.has_backward
    forward = op is not None and op.has_jvp
    doubled = [to_double(s) for s in ctx.samples]
    path, precision = _where_finite_differences_run(ctx, doubled)
    on_path = doubled if path is None else [path.move(s) for s in doubled]
    checked = cases = forward_cases = 0
    declined_by: dict[str, str] = {}  # what the op declines clearly -> the error saying so
    for original, sample in zip(doubled, on_path, strict=True):
        positions = diff_positions(sample)
        if not positions:
            continue
        inputs = Inputs(sample, tuple(positions))
        numel = sum(t.numel() for t in inputs.flat())
        fast = numel > 64 if fast_mode is None else fast_mode
        entries = batch_entries(sample, on_path, options["batch_entries"]) if functorch else None
        try:
            with nullcontext() if path is None else path.serving():
                counted = _finite_differences(
                    ctx, inputs, fast, options, entries, declined_by, backward, forward
                )
        except CheckFailure as failure:
            if path is None:
                raise
            raise _on_fallbacks(failure, path) from failure
        cases += counted[0]
        forward_cases += counted[1]
        if path is not None and precision is not None:
            _kernel_derivatives(
                ctx, Inputs(original, tuple(positions)), inputs, path, precision, backward, forward
            )
        checked += 1
    if not checked:
        raise Skip("no sample has a floating-point tensor argument to differentiate")
    ctx.info["samples"] = checked
    _report(ctx, options, backward, forward, cases, forward_cases, declined_by)
    if precision is not None:
        _report_precision(ctx, path, precision)


def _report_precision(ctx: CheckContext, path: FallbackPath | None, precision: torch.dtype) -> None:
    """``info["kernel_precision"]``, and where the finite differences ran when not on the
    kernel (``info["finite_differences_on"]`` and a note)."""
    label = ctx.info["kernel_precision"] = dtype_name(precision)
    if precision == torch.float64:
        return
    kernel = kernel_words(ctx)
    if path is None:
        ctx.info["finite_differences_on"] = "the kernels"
        ctx.notes.append(
            f"{kernel} compute in {label}, but no fallback path could be set up (a registered "
            f"kernel serves both {ctx.device.type!r} and the CPU): finite differences in "
            "float64 ran through the kernels"
        )
        return
    ctx.info["finite_differences_on"] = path.where
    ctx.notes.append(
        f"{kernel} compute in {label}: finite differences in float64 on {path.where}; the "
        f"derivatives through the kernels compared with the fallbacks' at {label} tolerance"
    )


def _on_fallbacks(failure: CheckFailure, path: FallbackPath) -> CheckFailure:
    """A failure of the finite-difference steps, its case saying they ran on the fallbacks."""
    case = f"{failure.case}, on {path.where}" if failure.case else f"on {path.where}"
    return CheckFailure(
        failure.op,
        failure.check,
        failure.problem,
        sample=failure.sample,
        case=case,
        mismatch=failure.mismatch,
    )


def _where_finite_differences_run(
    ctx: CheckContext, doubled: list[SampleInput]
) -> tuple[FallbackPath | None, torch.dtype | None]:
    """Where the finite-difference checks run, and the precision of the kernel serving the
    device (None: no kernel serves it). They run on the op as called (path None) unless a
    kernel that computes below float64 serves the device: then on the fallbacks."""
    op = kernel_served(ctx)
    if op is None:
        return None, None
    precision = kernel_precision(ctx, op, doubled)
    if precision is None or precision == torch.float64:
        return None, precision
    return fallback_path(ctx), precision


def _finite_differences(
    ctx: CheckContext,
    inputs: Inputs,
    fast: bool,
    options: AutogradOptions,
    entries: Entries | None,
    declined_by: dict[str, str],
    backward: bool,
    forward: bool,
) -> tuple[int, int]:
    """Steps 1 to 6 of the module docstring on one sample: the vmap cases of the backward and
    of the jvp checked."""
    op = ctx.target.opreg
    sample, positions = inputs.sample, list(inputs.positions)
    gradgrad, nested = options["gradgrad"], options["nested"]
    cases = forward_cases = 0
    if backward and _consuming_backward(ctx, inputs):
        # Once per forward: checked on fresh inputs; no second derivative; torch.func's
        # transforms would replay the backward on the same saved inputs.
        declined_by.setdefault(DOUBLE_BACKWARD, CONSUMING_BACKWARD)
        declined_by.setdefault("torch.func", CONSUMING_BACKWARD)
        if not forward and op is not None and FORWARD_AD not in declined_by:
            declined_by[FORWARD_AD] = _forward_declined(ctx, inputs)
        backward = False
    if backward:
        _gradcheck(ctx, inputs, fast)
        if gradgrad:
            refusal = _gradgradcheck(ctx, inputs, fast)
            if refusal is not None:
                declined_by.setdefault(DOUBLE_BACKWARD, refusal)
        if not forward and op is not None and FORWARD_AD not in declined_by:
            declined_by[FORWARD_AD] = _forward_declined(ctx, inputs)
        if entries is not None:
            cases += _functorch(ctx, sample, positions, entries, nested)
    if forward:
        _forward_gradcheck(ctx, inputs, fast)
        if backward:
            _jvp_matches_backward(ctx, inputs)
        if entries is not None:
            forward_cases += _forward_functorch(ctx, sample, positions, entries, nested)
    return cases, forward_cases


def _report(
    ctx: CheckContext,
    options: AutogradOptions,
    backward: bool,
    forward: bool,
    cases: int,
    forward_cases: int,
    declined_by: dict[str, str],
) -> None:
    """What the passing check tells: its info and notes."""
    functorch, gradgrad = options["functorch"], options["gradgrad"]
    ctx.info.update(functorch=functorch, gradgrad=gradgrad and backward)
    if gradgrad and backward:
        ctx.info["once_differentiable"] = DOUBLE_BACKWARD in declined_by
    if functorch and backward:
        ctx.info["functorch_cases"] = cases
    ctx.info["forward_ad"] = forward
    if forward and functorch:
        ctx.info["forward_functorch_cases"] = forward_cases
    if declined_by:
        ctx.info["declined"] = declined_by
    if DOUBLE_BACKWARD in declined_by and declined_by[DOUBLE_BACKWARD] == CONSUMING_BACKWARD:
        ctx.notes.append(
            f"once differentiable: {CONSUMING_BACKWARD}; its gradients were compared with "
            "finite differences on a fresh forward each, and torch.func's transforms (which "
            "would replay it on the same saved inputs) were not run"
        )
    elif DOUBLE_BACKWARD in declined_by:
        refusal = declined_by[DOUBLE_BACKWARD]
        note = f"once differentiable: double backward raises {refusal!r}"
        if refusal == TORCH_ONCE_DIFFERENTIABLE:
            note += f" under .backward(); {TORCH_ONCE_DIFFERENTIABLE_CAVEAT}"
        ctx.notes.append(note)


#: The autograd check, with its options' defaults.
AUTOGRAD = Check(
    "autograd",
    run_autograd,
    AutogradOptions(
        functorch=True, fast_mode=None, gradgrad=True, nested=True, batch_entries="auto"
    ),
    _validate,
    budget=Budget(
        30,
        "gradcheck and gradgradcheck call the op about twice per input element (slow mode, "
        "for up to 64 elements and to explain a failure), through Triton's interpreter on "
        "triton-cpu: smaller samples (tens of elements) check the same math faster",
    ),
)


def check_autograd(
    op: OpLike,
    samples: SamplesArg = None,
    *,
    device: str | torch.device | None = None,
    **options: Unpack[AutogradOptions],
) -> CheckResult:
    """Check the op's gradients in float64 on every sample: ``torch.autograd.gradcheck``;
    (``gradgrad``) ``gradgradcheck``, failing when the backward is not itself differentiable
    (a backward whose double backward raises a clear refusal is reported once differentiable);
    and (``functorch``) ``vmap(grad(op))`` and ``grad(vmap(op))`` against per-sample
    gradients, with each differentiated argument also unbatched and (``nested``) two nested
    vmaps. ``gradgrad``, ``functorch`` and ``nested`` are on by default.

    For an op registered with a ``jvp`` (forward mode): ``gradcheck`` with
    ``check_forward_ad=True``, ``<jvp(v), u> == <v, vjp(u)>`` against the backward (if any)
    and (``functorch``) ``jvp(vmap(op))`` and ``vmap(jvp(op))`` against per-sample tangents.

    On a device where a kernel computing below float64 (e.g. a Triton kernel computing in
    float32) serves the op, the steps above run on the fallbacks, and the derivatives through
    the kernels are compared with the fallbacks' at that precision's tolerance.

    Skipped for ops declared non-differentiable or with neither a backward nor a jvp.
    ``fast_mode`` is passed to the gradchecks and gradgradcheck (default: fast mode when the
    inputs have more than 64 elements). ``gradgrad=False`` accepts a backward that is not
    differentiable (no second derivatives). ``batch_entries`` builds the vmap batch entries
    as the vmap check does. Raises :class:`CheckFailure`.
    """
    return AUTOGRAD.check(op, samples, device, options)
