"""autocast check: an op with an ``autocast`` rule behaves under ``torch.autocast`` as its rule
says, the way an ATen op of that policy does.

For each sample (its float64 tensors made float32, the dtype autocast acts on), in a region
``torch.autocast(device_type, dtype=...)`` of the sample's device type:

- the op's output has the dtype and values of ``op.fallback`` run, outside any region, on the
  sample cast as the rule says (each tensor that is floating point, on that device type and
  not float64 is cast to the rule's dtype: the region's for ``"lower_precision"``; integer,
  bool and float64 tensors are left alone), with the cast dtype's tolerance;
- the fake (``FakeTensorMode`` in the same region) predicts that output's metadata;
- for a differentiable op with a backward, the gradients of a random weighting of the
  floating outputs reach every cast input, in that input's dtype, with the values autograd
  gives through a differentiable cast (``.to``) and the fallback.

Ops without a rule (and ops that are no opreg op) are skipped: autocast leaves them alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypedDict, Unpack

import torch

from opreg_core import SampleInput, VmapOp

from .._private import fake_mode, to_fake, tree_leaves
from ..compare import tolerance_for
from ..report import CheckResult
from ..samples import SamplesArg, clone_sample, map_tensors
from ..target import OpLike
from ._harness import Budget, Check, CheckContext, Skip
from ._outputs import floating_outputs, random_like, weighted_sum
from .fake import compare_meta


def eligible(t: torch.Tensor, device_type: str) -> bool:
    """Whether autocast casts ``t`` in a region of ``device_type`` (ATen's ``is_eligible``)."""
    return t.is_floating_point() and t.dtype != torch.float64 and t.device.type == device_type


def _sample_of(sample: SampleInput, fn: Callable[[torch.Tensor], torch.Tensor]) -> SampleInput:
    """``sample`` with ``fn`` applied to each of its tensors."""
    args, kwargs = map_tensors(fn, sample.args), map_tensors(fn, sample.kwargs)
    return SampleInput(args, kwargs, name=sample.name)


def cast_as_rule(sample: SampleInput, device_type: str, dtype: torch.dtype) -> SampleInput:
    """``sample`` with every eligible tensor cast to ``dtype`` (a differentiable ``.to``)."""
    return _sample_of(sample, lambda t: t.to(dtype) if eligible(t, device_type) else t)


def _in_float32(sample: SampleInput) -> SampleInput:
    """The sample with its float64 tensors made float32 (autocast leaves float64 alone)."""
    return _sample_of(sample, lambda t: t.detach().float() if t.dtype == torch.float64 else t)


def _detached(sample: SampleInput) -> SampleInput:
    """A copy of the sample whose tensors are fresh leaves (no grad)."""
    return _sample_of(sample, lambda t: t.detach().clone())


def _leaves(sample: SampleInput, device_type: str) -> list[torch.Tensor]:
    """The eligible tensors of ``sample`` (top level and in lists), in order."""
    leaves = tree_leaves((sample.args, sample.kwargs))
    return [t for t in leaves if isinstance(t, torch.Tensor) and eligible(t, device_type)]


def _leaf_names(sample: SampleInput, device_type: str, arg_names: Sequence[str]) -> list[str]:
    """The argument name of each of :func:`_leaves`' tensors (``xs[1]`` in a list), in order."""
    names: list[str] = []

    def add(value: Any, name: str) -> None:
        if isinstance(value, torch.Tensor):
            if eligible(value, device_type):
                names.append(name)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                add(item, f"{name}[{i}]")
        elif isinstance(value, dict):
            for key, item in value.items():
                add(item, f"{name}[{key!r}]")

    for i, value in enumerate(sample.args):
        add(value, arg_names[i] if i < len(arg_names) else f"argument {i}")
    for key, value in sample.kwargs.items():
        add(value, key)
    return names


def _rule_dtype(op: VmapOp[Any, Any], device_type: str, region: torch.dtype) -> torch.dtype:
    target = op.autocast[device_type] if op.autocast is not None else None
    if isinstance(target, torch.dtype):
        return target
    return region  # "lower_precision": the region's dtype


class AutocastOptions(TypedDict, total=False):
    """The autocast check's options: keywords of :func:`check_autocast`, ``check_op``'s
    ``options["autocast"]`` (defaults in :data:`AUTOCAST`)."""

    dtype: torch.dtype  #: the region's dtype (``torch.autocast(..., dtype=dtype)``)
    gradients: bool  #: also the gradients through the op under autocast


def _validate(options: AutocastOptions) -> None:
    dtype = options["dtype"]
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"the autocast check's dtype must be a floating torch.dtype, got {dtype!r}")


def _call(fn: Callable[..., Any], sample: SampleInput) -> Any:
    return fn(*sample.args, **sample.kwargs)


def autocast(device_type: str, dtype: torch.dtype) -> torch.autocast:
    return torch.autocast(device_type, dtype=dtype)


def _fake_run(
    fn: Callable[..., Any], sample: SampleInput, device_type: str, region: torch.dtype
) -> Any:
    """``fn`` on fake copies of ``sample``'s tensors, under ``FakeTensorMode`` and autocast."""
    mode = fake_mode(False)

    def fake(t: torch.Tensor) -> torch.Tensor:
        return to_fake(mode, t, False)

    with mode, autocast(device_type, region):
        return fn(*map_tensors(fake, sample.args), **map_tensors(fake, sample.kwargs))


def run_autocast(ctx: CheckContext, options: AutocastOptions) -> None:
    """The body of the autocast check (see :func:`check_autocast`)."""
    op = ctx.target.opreg
    if op is None or op.autocast is None:
        raise Skip("the op has no autocast rule (autocast leaves it alone)")
    device_type = ctx.device.type
    if device_type not in op.autocast:
        raise Skip(f"the op's autocast rule names no rule for {device_type}")
    region = options["dtype"]
    dtype = _rule_dtype(op, device_type, region)
    call = ctx.target.call
    cast_inputs = 0
    for sample in ctx.samples:
        sample32 = _in_float32(sample)
        cast_inputs += len(_leaves(sample32, device_type))
        case = f"torch.autocast({device_type!r}, dtype={region}), rule dtype {dtype}"
        cast = cast_as_rule(clone_sample(sample32), device_type, dtype)
        with ctx.step("the fallback on the inputs cast as the rule says", sample, case):
            expected = _call(op.fallback, cast)
        with ctx.step("the op under autocast", sample, case), autocast(device_type, region):
            actual, _ = ctx.run(call, sample32)
        ctx.assert_same(
            (expected, {}),
            (actual, {}),
            sample,
            case,
            "under autocast the op's output differs from the fallback run on the inputs cast "
            "as its rule says",
            tolerance=tolerance_for(dtype, ctx.tolerance),
        )
        with ctx.step("the op under autocast and FakeTensorMode", sample, case):
            found = compare_meta(actual, _fake_run(call, sample32, device_type, region))
        if found is not None:
            problem = "under autocast the fake disagrees with the real output"
            raise ctx.failure(problem, sample, case, mismatch=found)
        if options["gradients"] and op.differentiable and op.backward is not None:
            _check_gradients(ctx, op, sample, sample32, device_type, region, dtype, case)
    ctx.info.update(dtype=str(region), rule_dtype=str(dtype), cast_inputs=cast_inputs)
    if not cast_inputs:
        raise Skip(f"no sample has a tensor that autocast casts on {device_type}")


def _check_gradients(
    ctx: CheckContext,
    op: VmapOp[Any, Any],
    sample: SampleInput,
    sample32: SampleInput,
    device_type: str,
    region: torch.dtype,
    dtype: torch.dtype,
    case: str,
) -> None:
    """The gradients under autocast reach each cast input in its dtype, with the values of a
    differentiable cast followed by the fallback."""
    runs: list[tuple[Sequence[torch.Tensor | None], list[torch.Tensor]]] = []
    weights: list[torch.Tensor] | None = None
    for under_autocast in (True, False):
        fresh = _detached(sample32)
        inputs = _leaves(fresh, device_type)
        if not inputs:
            return
        for t in inputs:
            t.requires_grad_()
        what = "the op under autocast" if under_autocast else "the fallback after a cast"
        with ctx.step(f"backward through {what}", sample, case + ", gradients"):
            if under_autocast:
                with autocast(device_type, region):
                    out = _call(ctx.target.call, fresh)
            else:
                out = _call(op.fallback, cast_as_rule(fresh, device_type, dtype))
            outs = floating_outputs(out)
            if not outs or not any(o.requires_grad for o in outs):
                if under_autocast:
                    raise ctx.failure(
                        "under autocast no output of the op requires grad although its "
                        "floating inputs do: the cast must be differentiable",
                        sample,
                        case + ", gradients",
                    )
                return
            if weights is None:
                gen = torch.Generator().manual_seed(0)
                weights = [random_like(o, gen) for o in outs]
            loss = weighted_sum(outs, weights)
            grads = torch.autograd.grad(loss, inputs, allow_unused=True)
        runs.append((grads, inputs))
    (got, inputs), (expected, _) = runs
    tol = tolerance_for(dtype, ctx.tolerance)
    names = _leaf_names(sample32, device_type, ctx.target.arg_names)
    if len(names) != len(inputs):  # (a container tree_leaves reads otherwise)
        names = [f"cast input {i}" for i in range(len(inputs))]
    for name, g, e, x in zip(names, got, expected, inputs, strict=True):
        where = f"the gradient of argument '{name}'"
        if e is None:
            continue
        if g is None:
            raise ctx.failure(
                f"under autocast {where} is missing: the cast must be differentiable",
                sample,
                case + ", gradients",
            )
        if g.dtype != x.dtype:
            raise ctx.failure(
                f"under autocast {where} has dtype {g.dtype}, the input's is {x.dtype}",
                sample,
                case + ", gradients",
            )
        ctx.assert_same(
            (e, {}),
            (g, {}),
            sample,
            case + ", gradients",
            f"under autocast {where} differs from the expected one: autograd through a "
            f"differentiable cast to {dtype} and op.fallback (the rule's cast, then the "
            "fallback, outside autocast)",
            tolerance=tol,
        )


#: The autocast check, with its options' defaults.
AUTOCAST = Check(
    "autocast",
    run_autocast,
    AutocastOptions(dtype=torch.bfloat16, gradients=True),
    _validate,
    budget=Budget(
        20,
        "it runs the op under torch.autocast and the fallback on the cast inputs for every "
        "sample, with gradients: fewer samples, or gradients=False, make it faster",
    ),
)


def check_autocast(
    op: OpLike,
    samples: SamplesArg = None,
    *,
    device: str | torch.device | None = None,
    **options: Unpack[AutocastOptions],
) -> CheckResult:
    """Check the op's ``autocast`` rule: under ``torch.autocast`` (``dtype``, default
    bfloat16) its output, its fake and (``gradients=True``, the default) its gradients are
    those of the fallback on the inputs cast as the rule says. Skipped for an op without a
    rule. Raises :class:`CheckFailure`.
    """
    return AUTOCAST.check(op, samples, device, options)
