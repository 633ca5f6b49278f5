"""kernel check: an op's extra kernel (e.g. Triton) against its PyTorch fallback.

On a device type where a kernel was registered (``op.kernel_device_types``), ``op(*args)``
runs that kernel; the check compares it with ``op.fallback(*args)`` on the same inputs,
with the per-dtype tolerance table (exact for integer outputs, or with ``exact=True``).
For an op with a ``vmap_fn``, the batched operator (its batched kernel, if any) is compared
with ``vmap_fn`` too. CPU runs Triton kernels through Triton's interpreter when asked.

Every sample also runs in its layout variants (transposed, strided and offset inputs, see
:mod:`opreg_testing.layouts`), so a kernel that ignores strides or the storage offset is
caught even when all samples are contiguous. A kernel that needs contiguous inputs calls
``.contiguous()`` itself. A variant that the fallback and the kernel both reject with the same
``TypeError``/``ValueError`` (same type and message) counts as consistent: it is listed in
``info["layouts_rejected"]``; a variant only one of them rejects is a failure.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, TypedDict, Unpack

import torch

from opreg_core import SampleInput, VmapOp

from ..compare import EXACT, ToleranceSpec
from ..interpreter import TritonUnavailable, kernels_without_triton, triton_device, triton_info
from ..layouts import layout_variants, rejects, relayout_sample
from ..report import CheckResult
from ..samples import SamplesArg
from ..target import OpLike
from ._harness import Budget, Check, CheckContext, Skip
from ._vmap_cases import batch_entries, batched_sample, vmap_cases


def _kernel_op(ctx: CheckContext) -> VmapOp[Any, Any]:
    op = ctx.target.opreg
    if op is None:
        raise Skip("not an opreg op: there is no fallback to compare a kernel with")
    return op


def _check_batched(
    ctx: CheckContext,
    op: VmapOp[Any, Any],
    sample: SampleInput,
    tol: ToleranceSpec,
    layout: str | None = None,
) -> bool:
    batched_op, vmap_fn = op.batched_overload, op.vmap_fn
    if batched_op is None or vmap_fn is None or ctx.target.mutated_args:
        return False
    entries = batch_entries(sample, ctx.samples, "auto")
    cases = vmap_cases(sample, nested=False, entries=entries)[:1]
    if not cases:
        return False
    # in_dims 0 on every tensor argument: what vmap_fn receives (batch at dim 0 everywhere).
    inputs = batched_sample(sample, cases[0])
    case = f"batched operator vs vmap_fn, batch size {cases[0].sizes[0]}"
    if layout is not None:
        inputs = relayout_sample(inputs, layout, sample.name)
        case += f", {layout} inputs"
    with ctx.step("vmap_fn", sample, case):
        expected = ctx.run(vmap_fn, inputs)
    with ctx.step("the batched kernel", sample, case):
        actual = ctx.run(batched_op, inputs)
    ctx.assert_same(expected, actual, sample, case, "the batched kernel differs from vmap_fn", tol)
    return True


def _compare_one(
    ctx: CheckContext, op: VmapOp[Any, Any], sample: SampleInput, case: str, tol: ToleranceSpec
) -> None:
    with ctx.step("the fallback", sample, case):
        expected = ctx.run(op.fallback, sample)
    with ctx.step("the kernel", sample, case):
        actual = ctx.run(op, sample)
    ctx.assert_same(expected, actual, sample, case, "the kernel differs from the fallback", tol)


def _compare_layout(
    ctx: CheckContext, op: VmapOp[Any, Any], variant: SampleInput, case: str, tol: ToleranceSpec
) -> bool:
    """Kernel against fallback on a layout variant; False if both reject it alike."""
    with ctx.step("the fallback", variant, case):
        refusal = rejects(op.fallback, variant)
    if refusal is None:
        _compare_one(ctx, op, variant, case, tol)
        return True
    with ctx.step("the kernel", variant, case):
        kernel_refusal = rejects(op, variant)
    if kernel_refusal != refusal:
        got = "accepted it" if kernel_refusal is None else f"raised {kernel_refusal}"
        raise ctx.failure(
            f"the fallback rejects this layout ({refusal}) but the kernel {got}", variant, case
        )
    ctx.info.setdefault("layouts_rejected", {})[variant.name] = refusal
    return False


def _compare_all(
    ctx: CheckContext, op: VmapOp[Any, Any], tol: ToleranceSpec, device_type: str, layouts: bool
) -> None:
    batched = variants = 0
    case = f"kernel for {device_type!r} vs fallback"
    for sample in ctx.samples:
        _compare_one(ctx, op, sample, case, tol)
        batched += _check_batched(ctx, op, sample, tol)
        for layout, variant in layout_variants(sample) if layouts else []:
            if _compare_layout(ctx, op, variant, case, tol):
                variants += 1
                _check_batched(ctx, op, sample, tol, layout)
    ctx.info.update(
        device_type=device_type,
        samples=len(ctx.samples),
        batched_samples=batched,
        layout_variants=variants,
    )


class KernelOptions(TypedDict, total=False):
    """The kernel check's options: keywords of :func:`check_kernel`, ``check_op``'s
    ``options["kernel"]`` (defaults in :data:`KERNEL`)."""

    exact: bool  #: demand bitwise equality
    triton_interpreter: bool  #: on CPU, run a Triton op's Triton kernel in Triton's interpreter
    layouts: bool  #: also every sample's transposed, strided and offset variants


def run_kernel(ctx: CheckContext, options: KernelOptions) -> None:
    """The body of the kernel check (see :func:`check_kernel`)."""
    op = _kernel_op(ctx)
    device_type = ctx.device.type
    tol: ToleranceSpec = EXACT if options["exact"] else ctx.tolerance
    triton_op = triton_info(op) is not None
    use_interpreter = (
        options["triton_interpreter"]
        and device_type == "cpu"
        and device_type not in op.kernel_device_types
        and triton_op
    )
    if not use_interpreter and device_type not in op.kernel_device_types:
        others = ", ".join(sorted(op.kernel_device_types)) or "none"
        hint = ""
        if device_type == "cpu" and triton_op:
            hint = (
                "; its Triton kernel runs on CPU on the device triton-cpu "
                "(--device triton-cpu, or --opreg-device triton-cpu under pytest)"
            )
        raise Skip(
            f"no kernel registered for device type {device_type!r} (kernels: {others}){hint}"
        )
    if triton_op and kernels_without_triton():
        raise Skip("Triton is not available here, so the Triton kernel would run the fallback")
    try:
        context = triton_device("cpu", [op]) if use_interpreter else nullcontext()
        with context:
            _compare_all(ctx, op, tol, device_type, options["layouts"])
    except TritonUnavailable as exc:
        raise Skip(str(exc)) from exc
    ctx.info["kernel"] = "triton" if triton_op else "registered kernel"
    ctx.info["triton_interpreter"] = use_interpreter


#: The kernel check, with its options' defaults.
KERNEL = Check(
    "kernel",
    run_kernel,
    KernelOptions(exact=False, triton_interpreter=False, layouts=True),
    budget=Budget(
        20,
        "it runs the kernel and the fallback on every sample and layout variant (a Triton "
        "kernel through Triton's interpreter on triton-cpu): smaller samples make it faster",
    ),
)


def check_kernel(
    op: OpLike,
    samples: SamplesArg = None,
    *,
    device: str | torch.device | None = None,
    tolerance: ToleranceSpec = None,
    **options: Unpack[KernelOptions],
) -> CheckResult:
    """Check the op's kernel for ``device``'s type against its fallback, on every sample.

    Skipped when no kernel is registered for the device type. With ``triton_interpreter=True``
    and a CPU device, an opreg-kernels Triton op gets a CPU kernel run by Triton's interpreter
    for the duration of the check. ``exact=True`` demands bitwise equality (random bits);
    integer outputs are always compared exactly. With ``layouts=True`` (default), every
    sample's transposed, strided and offset variants are compared too. Raises
    :class:`CheckFailure`.
    """
    return KERNEL.check(op, samples, device, options, tolerance)
