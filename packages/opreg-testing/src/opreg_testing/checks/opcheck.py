"""opcheck check: ``torch.library.opcheck`` on every sample, with a choice of its test utils."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict, Unpack

import torch

from opreg_core import SampleInput

from ..report import CheckResult
from ..samples import SamplesArg, clone_sample
from ..target import OpLike
from ._harness import Budget, Check, CheckContext, format_exception

#: The test utils of ``torch.library.opcheck`` (all run by default).
OPCHECK_UTILS: tuple[str, ...] = (
    "test_schema",
    "test_autograd_registration",
    "test_faketensor",
    "test_aot_dispatch_dynamic",
)


def check_utils(test_utils: str | Sequence[str]) -> tuple[str, ...]:
    """Validate ``test_utils`` (a name or names from :data:`OPCHECK_UTILS`)."""
    utils = (test_utils,) if isinstance(test_utils, str) else tuple(test_utils)
    unknown = [u for u in utils if u not in OPCHECK_UTILS]
    if unknown or not utils:
        raise ValueError(
            f"unknown opcheck test util(s) {unknown or list(utils)}; "
            f"choose from {', '.join(OPCHECK_UTILS)}"
        )
    return utils


def _with_grad(sample: SampleInput) -> SampleInput:
    """A copy whose floating tensor args require grad (so opcheck also tests the backward)."""
    copy = clone_sample(sample)
    args = tuple(
        a.requires_grad_(True) if isinstance(a, torch.Tensor) and a.dtype.is_floating_point else a
        for a in copy.args
    )
    return SampleInput(args, copy.kwargs, copy.name)


def _grad_samples(ctx: CheckContext) -> bool:
    op = ctx.target.opreg
    return op is not None and op.has_backward and not op.mutates_args


class OpcheckOptions(TypedDict, total=False):
    """The opcheck check's options: keywords of :func:`check_opcheck`, ``check_op``'s
    ``options["opcheck"]`` (defaults in :data:`OPCHECK`)."""

    test_utils: str | Sequence[str]  #: which of :data:`OPCHECK_UTILS` to run


def _validate(options: OpcheckOptions) -> None:
    check_utils(options["test_utils"])


def run_opcheck(ctx: CheckContext, options: OpcheckOptions) -> None:
    """The body of the opcheck check (see :func:`check_opcheck`)."""
    utils = check_utils(options["test_utils"])
    with_grad = _grad_samples(ctx)
    for sample in ctx.samples:
        runs = [(clone_sample(sample), "")]
        if with_grad:
            runs.append((_with_grad(sample), ", inputs require grad"))
        for inputs, note in runs:
            for util in utils:
                case = f"torch.library.opcheck, {util}{note}"
                with ctx.step("opcheck", sample, case):
                    result = torch.library.opcheck(
                        ctx.target.overload,
                        inputs.args,
                        inputs.kwargs,
                        test_utils=util,
                        raise_exception=False,
                    )
                outcome = result.get(util)
                if outcome != "SUCCESS":
                    detail = (
                        format_exception(outcome)
                        if isinstance(outcome, BaseException)
                        else str(outcome)
                    )
                    failure = ctx.failure(f"{util} failed: {detail}", sample, case)
                    if isinstance(outcome, BaseException):
                        raise failure from outcome
                    raise failure
    ctx.info.update(test_utils=list(utils), requires_grad_samples=with_grad)


#: The opcheck check, with its options' defaults.
OPCHECK = Check(
    "opcheck",
    run_opcheck,
    OpcheckOptions(test_utils=OPCHECK_UTILS),
    _validate,
    budget=Budget(
        30,
        "torch.library.opcheck runs each of its test_utils on every sample: fewer samples, "
        "or fewer test_utils, make it faster",
    ),
)


def check_opcheck(
    op: OpLike,
    samples: SamplesArg = None,
    *,
    device: str | torch.device | None = None,
    **options: Unpack[OpcheckOptions],
) -> CheckResult:
    """Run ``torch.library.opcheck`` on every sample with the chosen ``test_utils`` (a name
    or names from :data:`OPCHECK_UTILS`; default: all of them).

    For opreg ops with a backward each sample also runs with inputs that require grad, so the
    backward goes through opcheck as well. Raises :class:`CheckFailure` naming the failing util.
    """
    return OPCHECK.check(op, samples, device, options)
