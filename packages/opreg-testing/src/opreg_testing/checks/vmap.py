"""vmap check: ``vmap(op)`` equals the op stacked over the batch, for many in_dims and nestings.

It also reports which batching path computed the result: an opreg op's ``vmap_fn`` (the fast
rule; read from the op's ``vmap_stats``), another batching rule, or PyTorch's per-sample
fallback loop (no kernel on ``FuncTorchBatched``).

The entries of a batch differ in value, not only in order (``batch_entries``: see
:mod:`._batching`), so a rule that reduces over the batch (a mean, max, norm, sort, cumsum or
softmax over all entries) is caught. Every sample is also run in its layout variants
(:mod:`opreg_testing.layouts`): the batched tensors vmap receives are transposed, strided
or offset views, for the first plain and the first nested case.
"""

from __future__ import annotations

import torch

from opreg_core import SampleInput

from ..compare import ToleranceSpec, compare
from ..layouts import layout_variants, rejects, relayout_sample
from ..report import CheckResult
from ..samples import SamplesArg
from ..target import OpLike, Target
from ._batching import (
    BATCH_ENTRIES,
    VmapCase,
    batched_sample,
    expected_output,
    vmap_cases,
    vmapped,
)
from ._batching import batch_entries as entries_for
from ._common import CheckContext, Skip, prepare, run_public

FAST = "vmap_fn"  #: the opreg op's own batched implementation ran
FAST_LOOP = "vmap_fn + per-sample loop"  #: vmap_fn, and a loop for levels past max_vmap_level
RULE = "batching rule"  #: a FuncTorchBatched kernel of a non-opreg op ran
FALLBACK = "PyTorch per-sample fallback"


def _expected_path(target: Target, case: VmapCase) -> str | None:
    op = target.opreg
    if op is None or op.vmap_fn is None:
        return None
    if op.max_vmap_level is not None and case.depth > op.max_vmap_level:
        return FAST_LOOP
    return FAST


def _observed_path(target: Target, before: tuple[int, int, int] | None) -> str:
    op = target.opreg
    if op is None:
        return RULE if target.has_batching_rule() else FALLBACK
    if op.vmap_fn is None or before is None:
        return FALLBACK
    stats = op.vmap_stats
    fast, loop = stats.fast - before[0], stats.loop - before[2]
    if fast == 0:
        return FALLBACK
    return FAST_LOOP if loop else FAST


def _stats(target: Target) -> tuple[int, int, int] | None:
    if target.opreg is None:
        return None
    s = target.opreg.vmap_stats
    return (s.fast, s.nested, s.loop)


def _mutation_safe(case: VmapCase, mutated: list[int]) -> bool:
    """An op that writes to an argument can only be vmapped if that argument is batched."""
    return all(lvl[p] is not None for lvl in case.levels for p in mutated)


def _mixing_hint(ctx: CheckContext, sample: SampleInput, case: VmapCase, randomness: str) -> str:
    """Why vmap(op) may differ: does a batch of one entry (the sample itself) come out right?"""
    single = VmapCase(case.levels, (1,) * case.depth, case.entries)
    try:
        one = batched_sample(sample, single)
        got, _ = ctx.run(vmapped(ctx.target.call, single, one.kwargs, randomness), one)
        found = compare(
            expected_output(ctx.target.call, sample, single), got, tolerance=ctx.tolerance
        )
    except Exception:  # the hint is a guess; the mismatch itself is what is reported
        return ""
    if found is None:
        return (
            ", though a batch of one entry is right, so the entries influence each other "
            "(does the batching rule reduce over the batch dim? e.g. a mean, sum, norm, max, "
            "sort, cumsum or softmax over all entries); first difference"
        )
    return (
        ", already for a batch of one entry (the batching rule may compute another "
        "function, ignore an argument or put the batch dim in the wrong place); first difference"
    )


def _check_case(
    ctx: CheckContext,
    sample: SampleInput,
    case: VmapCase,
    randomness: str,
    require_fast: bool,
    layout: str | None = None,
) -> str:
    op = ctx.target.call
    where = str(case) if layout is None else f"{case}, {layout} batched inputs"
    with ctx.step("the op on one batch entry", sample, where):
        expected = expected_output(op, sample, case)
    batched = batched_sample(sample, case)
    if layout is not None:
        batched = relayout_sample(batched, layout, sample.name)
    before = _stats(ctx.target)
    with ctx.step("vmap(op)", sample, where):
        actual = ctx.run(
            vmapped(op, case, batched.kwargs, randomness),
            SampleInput(batched.args, name=sample.name),
        )
    path = _observed_path(ctx.target, before)
    if compare(expected, actual[0], tolerance=ctx.tolerance) is not None:
        hint = _mixing_hint(ctx, sample, case, randomness)
        ctx.assert_same(
            (expected, {}),
            (actual[0], {}),
            sample,
            where,
            f"vmap(op) differs from the op stacked over the batch{hint}",
        )
    wanted = _expected_path(ctx.target, case)
    if require_fast and wanted is not None and path != wanted:
        raise ctx.failure(
            f"the batching path was {path!r}, expected {wanted!r}: "
            "the op's vmap_fn did not compute vmap(op)",
            sample,
            where,
        )
    return path


def _layout_cases(cases: list[VmapCase]) -> list[VmapCase]:
    """The cases a layout variant runs: the first plain one and the first nested one."""
    plain = [c for c in cases if c.depth == 1][:1]
    return plain + [c for c in cases if c.depth > 1][:1]


def run_vmap(
    ctx: CheckContext,
    *,
    nested: bool = True,
    randomness: str = "error",
    require_fast: bool = True,
    batch_entries: str = "auto",
    layouts: bool = True,
) -> None:
    """The body of the vmap check (see :func:`check_vmap`)."""
    arg_names = ctx.target.arg_names
    mutated = [arg_names.index(n) for n in ctx.target.mutated_args if n in arg_names]
    paths: dict[str, int] = {}
    sources: dict[str, int] = {}
    rejected: dict[str, str] = {}
    for sample in ctx.samples:
        entries = entries_for(sample, ctx.samples, batch_entries)
        sources[entries.mode] = sources.get(entries.mode, 0) + 1
        cases = [
            c
            for c in vmap_cases(sample, nested=nested, entries=entries)
            if _mutation_safe(c, mutated)
        ]
        for case in cases:
            path = _check_case(ctx, sample, case, randomness, require_fast)
            paths[path] = paths.get(path, 0) + 1
        for layout, variant in layout_variants(sample) if layouts and cases else []:
            with ctx.step("the op", variant, "a layout variant, without vmap"):
                refusal = rejects(ctx.target.call, variant)
            if refusal is not None:
                rejected[variant.name] = refusal
                continue
            for case in _layout_cases(cases):
                path = _check_case(ctx, sample, case, randomness, require_fast, layout)
                paths[path] = paths.get(path, 0) + 1
    if not paths:
        raise Skip("no sample has a tensor argument that vmap can batch")
    ctx.info["cases"] = sum(paths.values())
    ctx.info["paths"] = paths
    ctx.info["batching"] = next(iter(paths)) if len(paths) == 1 else "mixed"
    ctx.info["batch_entries"] = sources
    if rejected:
        ctx.info["layouts_rejected"] = rejected


def check_vmap(
    op: OpLike,
    samples: SamplesArg = None,
    *,
    device: str | torch.device | None = None,
    nested: bool = True,
    randomness: str = "error",
    require_fast: bool = True,
    batch_entries: str = "auto",
    layouts: bool = True,
    tolerance: ToleranceSpec = None,
) -> CheckResult:
    """Check ``vmap(op)`` against the op applied to each batch entry and stacked.

    For every sample it tries in_dims 0, -1 and a middle dim on all tensor arguments, ``None``
    on each argument in turn, a mix, and (with ``nested``) 2 and 3 nested vmaps mixing them.
    ``result.info["batching"]`` says which path ran (``"vmap_fn"``, ``"batching rule"``,
    ``"PyTorch per-sample fallback"``); with ``require_fast`` an opreg op that has a
    ``vmap_fn`` fails if another path computed a case (within ``max_vmap_level``).
    ``batch_entries`` says how the entries of a batch are built from a sample: ``"auto"``
    (default), ``"variants"``, ``"permute"`` or ``"samples"`` (see :mod:`._batching`); with
    ``layouts`` each sample is also run with transposed, strided and offset batched inputs.
    Raises :class:`CheckFailure` on the first difference.
    """
    if randomness not in ("error", "same", "different"):
        raise ValueError(f"randomness must be 'error', 'same' or 'different', got {randomness!r}")
    if batch_entries not in BATCH_ENTRIES:
        choices = ", ".join(map(repr, BATCH_ENTRIES))
        raise ValueError(f"batch_entries must be one of {choices}, got {batch_entries!r}")
    ctx = prepare("vmap", op, samples, device, tolerance)
    return run_public(
        ctx,
        lambda c: run_vmap(
            c,
            nested=nested,
            randomness=randomness,
            require_fast=require_fast,
            batch_entries=batch_entries,
            layouts=layouts,
        ),
    )
