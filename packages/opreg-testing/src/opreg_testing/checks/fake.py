"""fake check: the op under ``FakeTensorMode`` predicts the real output's metadata.

Shape, dtype, device and strides (of dims longer than 1) must agree, with static shapes and
with every input dim symbolic (dynamic shapes, as ``torch.compile(dynamic=True)`` traces).
For an opreg op with a ``vmap_fn``, ``vmap(op)`` is checked the same way, which exercises
``fake_vmap_fn``. Every sample is also checked in its layout variants (transposed, strided and
offset inputs, :mod:`opreg_testing.layouts`): the fake must work on non-contiguous inputs and
predict the strides the real op gives for them (an output that follows its input's layout, or
a contiguous one). A variant the op itself rejects with a ``TypeError``/``ValueError`` is
skipped and listed in ``info["layouts_rejected"]``.
"""

from __future__ import annotations

from typing import Any, TypedDict, Unpack

import torch

from opreg_core import SampleInput

from .._private import FakeTensorMode, fake_mode, to_fake
from ..compare import Mismatch
from ..layouts import layout_variants, rejects
from ..report import CheckResult
from ..samples import SamplesArg, map_tensors
from ..target import OpLike
from ._harness import Budget, Check, CheckContext
from ._vmap_cases import batch_entries, batched_sample, vmap_cases, vmapped


def _fake_inputs(mode: FakeTensorMode, sample: SampleInput, dynamic: bool) -> SampleInput:
    def convert(t: torch.Tensor) -> torch.Tensor:
        return to_fake(mode, t, dynamic)

    return SampleInput(
        map_tensors(convert, sample.args), map_tensors(convert, sample.kwargs), sample.name
    )


def _significant_strides(t: torch.Tensor) -> tuple[int | None, ...]:
    """Strides, with those of dims of size <= 1 blanked out (they never matter)."""
    if t.numel() == 0:
        return tuple(None for _ in t.shape)
    return tuple(int(s) if int(n) > 1 else None for n, s in zip(t.shape, t.stride(), strict=True))


def compare_meta(real: Any, fake: Any, where: str = "output") -> Mismatch | None:
    """The first metadata difference between a real and a fake result."""
    if isinstance(real, torch.Tensor):
        if not isinstance(fake, torch.Tensor):
            return Mismatch(where, "type", "Tensor", type(fake).__name__)
        shape = tuple(int(s) for s in fake.shape)
        if fake.dtype != real.dtype:
            return Mismatch(where, "dtype", real.dtype, fake.dtype)
        if shape != tuple(real.shape):
            return Mismatch(where, "shape", tuple(real.shape), shape)
        if fake.device != real.device:
            return Mismatch(where, "device", str(real.device), str(fake.device))
        if _significant_strides(fake) != _significant_strides(real):
            return Mismatch(where, "strides", real.stride(), tuple(int(s) for s in fake.stride()))
        return None
    if isinstance(real, (tuple, list)):
        if not isinstance(fake, (tuple, list)) or len(fake) != len(real):
            got = len(fake) if isinstance(fake, (tuple, list)) else type(fake).__name__
            return Mismatch(where, "number of outputs", len(real), got)
        top = where == "output"
        for i, (r, f) in enumerate(zip(real, fake, strict=True)):
            found = compare_meta(r, f, f"output {i}" if top else f"{where}[{i}]")
            if found is not None:
                return found
    return None


def _case(vmap_case: str | None, dynamic: bool) -> str:
    shapes = "dynamic shapes" if dynamic else "static shapes"
    return shapes if vmap_case is None else f"{vmap_case}, {shapes}"


def _check_one(
    ctx: CheckContext,
    fn: Any,
    what: str,
    sample: SampleInput,
    inputs: SampleInput,
    vmap_case: str | None,
    dynamic: bool,
) -> None:
    """Compare ``fn(*inputs)`` on real and fake tensors; failures describe ``sample``."""
    case = _case(vmap_case, dynamic)
    with ctx.step(f"{what} on real tensors", sample, case):
        real, _ = ctx.run(fn, inputs)
    _compare_fake(ctx, fn, what, sample, inputs, case, real, dynamic)


def _compare_fake(
    ctx: CheckContext,
    fn: Any,
    what: str,
    sample: SampleInput,
    inputs: SampleInput,
    case: str,
    real: Any,
    dynamic: bool,
) -> None:
    mode = fake_mode(dynamic)
    with ctx.step(f"{what} under FakeTensorMode", sample, case):
        fake_inputs = _fake_inputs(mode, inputs, dynamic)
        with mode:
            fake = fn(*fake_inputs.args, **fake_inputs.kwargs)
        found = compare_meta(real, fake)
    if found is not None:
        problem = f"the fake implementation of {what} disagrees with the real output"
        raise ctx.failure(problem, sample, case, mismatch=found)


def _check_layouts(ctx: CheckContext, sample: SampleInput, modes: tuple[bool, ...]) -> None:
    """The op on each layout variant of ``sample`` it accepts, real against fake."""
    op = ctx.target.call
    for _, variant in layout_variants(sample):
        with ctx.step("the op", variant, "a layout variant, on real tensors"):
            refusal = rejects(op, variant)
        if refusal is not None:
            ctx.info.setdefault("layouts_rejected", {})[variant.name] = refusal
            continue
        for dyn in modes:
            _check_one(ctx, op, "the op", variant, variant, None, dyn)


class FakeOptions(TypedDict, total=False):
    """The fake check's options: keywords of :func:`check_fake`, ``check_op``'s
    ``options["fake"]`` (defaults in :data:`FAKE`)."""

    dynamic: bool  #: also with every input size symbolic
    layouts: bool  #: also every sample's transposed, strided and offset variants


def run_fake(ctx: CheckContext, options: FakeOptions) -> None:
    """The body of the fake check (see :func:`check_fake`)."""
    dynamic, layouts = options["dynamic"], options["layouts"]
    op = ctx.target.call
    modes = (False, True) if dynamic else (False,)
    opreg = ctx.target.opreg
    batched = opreg is not None and opreg.batched_overload is not None
    for sample in ctx.samples:
        for dyn in modes:
            _check_one(ctx, op, "the op", sample, sample, None, dyn)
        if layouts:
            _check_layouts(ctx, sample, modes)
        entries = batch_entries(sample, ctx.samples, "auto")
        cases = vmap_cases(sample, nested=False, entries=entries)[:1] if batched else []
        for case in cases:
            b = batched_sample(sample, case)
            # The keyword arguments go in the inputs (not bound): under FakeTensorMode they
            # must be fake tensors too.
            fn = vmapped(op, case, {}, "error", ctx.target.output_batch_dims)
            inputs = SampleInput(b.args, b.kwargs, name=sample.name)
            try:
                real, _ = ctx.run(fn, inputs)
            except Exception as exc:  # the vmap check reports this; nothing to compare here
                batched = False
                ctx.info["fake_vmap_fn"] = f"not checked: vmap(op) raised {type(exc).__name__}"
                continue
            for dyn in modes:
                _compare_fake(ctx, fn, "vmap(op)", sample, inputs, _case(str(case), dyn), real, dyn)
    ctx.info["dynamic"] = dynamic
    ctx.info.setdefault("fake_vmap_fn", "checked" if batched else "no vmap_fn")


#: The fake check, with its options' defaults.
FAKE = Check(
    "fake",
    run_fake,
    FakeOptions(dynamic=True, layouts=True),
    budget=Budget(
        10,
        "it runs the op and its fake on every sample and layout variant, with static and "
        "symbolic shapes: fewer samples make it faster",
    ),
)


def check_fake(
    op: OpLike,
    samples: SamplesArg = None,
    *,
    device: str | torch.device | None = None,
    **options: Unpack[FakeOptions],
) -> CheckResult:
    """Check the op's fake implementation against real outputs, for every sample.

    Compares shape, dtype, device and strides, with static shapes and (``dynamic=True``, the
    default) with all input sizes symbolic; for opreg ops with a ``vmap_fn`` also ``vmap(op)``
    (``fake_vmap_fn``). With ``layouts=True`` (default), every sample's transposed, strided and
    offset variants too. Raises :class:`CheckFailure` naming the sample and the first
    difference.
    """
    return FAKE.check(op, samples, device, options)
