"""``check_op``: run a chosen set of checks on one op and collect a structured report."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from .checks import ALL_CHECKS, CHECKS
from .checks._common import CheckContext, execute, sample_device
from .compare import ToleranceSpec, check_tolerance_spec
from .devices import TRITON_CPU
from .interpreter import triton_device
from .report import CheckResult, OpReport
from .samples import SamplesArg, as_device, gather_samples
from .target import OpLike, resolve

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


def _check_options(options: Mapping[str, Mapping[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """Validate per-check keyword options against each check body's signature."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(
            f"options must map check names to keyword dicts, got {type(options).__name__}"
        )
    result = {}
    for check, opts in options.items():
        if check not in CHECKS:
            raise ValueError(
                f"options for unknown check {check!r}; checks: {', '.join(ALL_CHECKS)}"
            )
        params = inspect.signature(CHECKS[check]).parameters
        allowed = [p for p in params if params[p].kind is inspect.Parameter.KEYWORD_ONLY]
        bad = [k for k in opts if k not in allowed]
        if bad:
            raise TypeError(
                f"unknown option(s) {', '.join(map(repr, bad))} for the {check} check; "
                f"it accepts: {', '.join(allowed) or 'none'}"
            )
        result[check] = dict(opts)
    return result


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
    opts = _check_options(options)
    tol = check_tolerance_spec(tolerance)
    target = resolve(op)
    triton_cpu = isinstance(device, str) and device.strip().lower() == TRITON_CPU
    dev = torch.device("cpu") if triton_cpu else as_device(device)
    gathered = gather_samples(target, samples, dev)
    where = dev or sample_device(gathered)
    report = OpReport(target.name, TRITON_CPU if triton_cpu else str(where))
    # triton-cpu: every Triton op serves the CPU with its Triton kernel (Triton's interpreter)
    # for every check, exactly like the plugin's opreg_triton_cpu fixture.
    serving: AbstractContextManager[Any] = triton_device("cpu") if triton_cpu else nullcontext()
    with serving:
        for name in names:
            ctx = CheckContext(name, target, gathered, where, tol)
            result = execute(ctx, functools.partial(CHECKS[name], **opts.get(name, {})))
            report.results.append(result)
            if progress is not None:
                progress(result)
    return report
