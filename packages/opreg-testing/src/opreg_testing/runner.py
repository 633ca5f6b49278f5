"""``check_op``: run a chosen set of checks on one op and collect a structured report."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

import torch

from .checks import ALL_CHECKS, CHECKS
from .checks._harness import CheckContext, Skip, execute, prepare
from .compare import ToleranceSpec, check_tolerance_spec
from .devices import TRITON_CPU, is_triton_cpu
from .interpreter import device_and_serving, triton_info
from .report import CheckResult, OpReport
from .samples import SamplesArg
from .target import OpLike

#: Called after each check with its result (the CLI prints progress with it).
Progress = Callable[[CheckResult], None]


def select_checks(checks: str | Iterable[str] | None) -> tuple[str, ...]:
    """Validate check names (``None``: all; a string may list several, comma-separated)."""
    if checks is None:
        return ALL_CHECKS
    names = [c.strip() for c in checks.split(",")] if isinstance(checks, str) else list(checks)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"checks must name at least one of: {', '.join(ALL_CHECKS)}")
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise ValueError(
            f"unknown check(s) {', '.join(map(repr, unknown))}; choose from {', '.join(ALL_CHECKS)}"
        )
    return tuple(dict.fromkeys(names))


def _check_options(
    names: tuple[str, ...], options: Mapping[str, Mapping[str, Any]] | None
) -> dict[str, Any]:
    """Each check's options in ``options``, completed with its defaults and validated (also
    those of checks not run), for the checks in ``names``."""
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise TypeError(
            f"options must map check names to keyword dicts, got {type(options).__name__}"
        )
    unknown = [check for check in options if check not in CHECKS]
    if unknown:
        raise ValueError(
            f"options for unknown check {unknown[0]!r}; checks: {', '.join(ALL_CHECKS)}"
        )
    given = {check: CHECKS[check].resolve(opts) for check, opts in options.items()}
    return {name: given[name] if name in given else CHECKS[name].resolve({}) for name in names}


def check_op(
    op: OpLike,
    samples: SamplesArg = None,
    *,
    checks: str | Iterable[str] | None = None,
    device: str | torch.device | None = None,
    tolerance: ToleranceSpec = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    progress: Progress | None = None,
) -> OpReport:
    """Run ``checks`` (default: all of ``ALL_CHECKS``) on ``op`` and report each outcome.

    When the op has a kernel serving the device (its Triton kernel on ``triton-cpu`` or
    CUDA, a registered kernel), the kernel check runs first; if it fails, the checks that run
    the op through that kernel (all but the fake check) are skipped, their reason saying so
    ("the kernel check failed on triton-cpu, and this check runs the op through its Triton
    kernel: fix the kernel first"), instead of failing after it (a gradcheck through a wrong
    kernel can take minutes). A check that runs over its time budget gets a note saying so.
    ``report.results`` keep the order of ``checks``; ``progress`` gets them in the order they
    ran (skipped ones too).
    ``samples`` default to the op's ``sample_inputs(device)``. Failures do not stop the run:
    they are recorded in the report (``report.raise_for_failures()`` raises them), as are
    skipped checks with their reason; ``report.checked`` says whether any check passed.
    ``device="triton-cpu"`` runs on the CPU with every Triton op's Triton kernel serving it,
    through Triton's interpreter, in every check (``TritonUnavailable`` without Triton or
    opreg-kernels). ``options`` passes keyword options to single checks,
    e.g. ``{"compile": {"backend": "aot_eager"}, "vmap": {"nested": False}}``.
    Bad arguments raise ``TypeError``/``ValueError``; an op without samples raises
    :class:`NoSamplesError`.
    """
    names = select_checks(checks)
    opts = _check_options(names, options)
    tol = check_tolerance_spec(tolerance)
    # triton-cpu: every Triton op serves the CPU with its Triton kernel (Triton's interpreter)
    # for every check, exactly like the plugin's opreg_triton_cpu fixture.
    run_on, serving = device_and_serving(device)
    base = prepare(names[0], op, samples, run_on, tol)
    report = OpReport(base.name, TRITON_CPU if is_triton_cpu(device) else str(base.device))
    results: dict[str, CheckResult] = {}
    with serving:
        kernel_failed: str | None = None  # then: why the checks through the kernel skip
        for name in _run_order(names, base):
            check = CHECKS[name]
            ctx = base.for_check(name)
            if kernel_failed is not None and name not in _NOT_THROUGH_KERNEL:
                result = execute(ctx, partial(_skip, kernel_failed))
            else:
                result = execute(ctx, check.bind(opts[name]), check.budget)
            results[name] = result
            if name == "kernel" and result.failed:
                kernel_failed = _fix_the_kernel_first(base, report.device)
            if progress is not None:
                progress(result)
    report.results.extend(results[name] for name in names)
    return report


#: Checks that do not run the op through its kernel: the kernel check itself, and the fake
#: check, which compares the fake implementation with the real output's metadata, never its
#: values.
_NOT_THROUGH_KERNEL = frozenset({"kernel", "fake"})


def _run_order(names: tuple[str, ...], base: CheckContext) -> tuple[str, ...]:
    """``names`` with the kernel check first when the op has a kernel (e.g. its Triton kernel)
    serving the device: when it fails, the checks that run the op through the kernel are
    skipped (they would fail too, slowly, and blame e.g. the batching rule)."""
    op = base.target.opreg
    if "kernel" not in names or op is None or base.device.type not in op.kernel_device_types:
        return names
    return ("kernel", *(n for n in names if n != "kernel"))


def _fix_the_kernel_first(base: CheckContext, device: str) -> str:
    """Why a check is skipped after the kernel check failed: ``the kernel check failed on
    triton-cpu, and this check runs the op through its Triton kernel: fix the kernel first``."""
    op = base.target.opreg
    kernel = "Triton kernel" if op is not None and triton_info(op) is not None else "kernel"
    return (
        f"the kernel check failed on {device}, and this check runs the op through its "
        f"{kernel}: fix the kernel first"
    )


def _skip(reason: str, ctx: CheckContext) -> None:
    """A check body that only skips, saying why."""
    raise Skip(reason)
