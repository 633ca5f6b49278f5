"""vmap check: ``vmap(op)`` equals the op stacked over the batch, for many in_dims and nestings.

It also reports which batching path computed the result: an opreg op's ``vmap_fn`` (the fast
rule; read from the op's ``vmap_stats``), another batching rule, or PyTorch's per-sample
fallback loop (no kernel on ``FuncTorchBatched``).

The entries of a batch differ in value, not only in order (``batch_entries``: see
:mod:`._vmap_cases`), so a rule that reduces over the batch (a mean, max, norm, sort, cumsum or
softmax over all entries) is caught. Every sample is also run in its layout variants
(:mod:`opreg_testing.layouts`): the batched tensors vmap receives are transposed, strided
or offset views, for the first plain and the first nested case.
"""

from __future__ import annotations

from typing import Any, TypedDict, Unpack

import torch

from opreg_core import SampleInput

from ..compare import ToleranceSpec, compare
from ..layouts import layout_variants, rejects, relayout_sample
from ..report import CheckResult
from ..samples import SamplesArg
from ..target import OpLike, Target
from ._harness import Budget, Check, CheckContext, Skip
from ._vmap_cases import (
    VmapCase,
    batch_entries,
    batched_sample,
    check_batch_entries,
    expected_call,
    expected_output,
    vmap_cases,
    vmapped,
)

FAST = "vmap_fn"  #: the opreg op's own batched implementation ran
FAST_LOOP = "vmap_fn + per-sample loop"  #: vmap_fn, and a loop for levels past max_vmap_level
RULE = "batching rule"  #: a FuncTorchBatched kernel of a non-opreg op ran
FALLBACK = "PyTorch per-sample fallback"
LOOP = "opreg per-sample loop"  #: an opreg op without vmap_fn: opreg's loop rule ran


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
    if before is None:
        return FALLBACK
    stats = op.vmap_stats
    fast, loop = stats.fast - before[0], stats.loop - before[2]
    if op.vmap_fn is None:
        return LOOP if loop else FALLBACK
    if fast == 0:
        return FALLBACK
    return FAST_LOOP if loop else FAST


def _stats(target: Target) -> tuple[int, int, int] | None:
    if target.opreg is None:
        return None
    s = target.opreg.vmap_stats
    return (s.fast, s.nested, s.loop)


def _mutation_safe(case: VmapCase, mutated: list[int]) -> bool:
    """An op that writes to an argument can only be vmapped if that argument is batched at
    every level (else vmap refuses the write, as torch's in-place ops do)."""
    return all(lvl[p] is not None for lvl in case.levels for p in mutated)


def _out_dims(target: Target) -> Any:
    """vmap's ``out_dims`` for the op: None for an op returning nothing (an op that only
    writes to its arguments), which vmap cannot give an int out_dim."""
    dims = target.output_batch_dims
    return None if dims == () else dims


def _written(target: Target) -> list[int]:
    """Positions of the arguments the op writes to (``mutates_args``)."""
    names = target.arg_names
    return [names.index(n) for n in target.mutated_args if n in names]


def _mixing_hint(ctx: CheckContext, sample: SampleInput, case: VmapCase, randomness: str) -> str:
    """Why vmap(op) may differ: does a batch of one entry (the sample itself) come out right?
    (``check_op`` does not run this check after the kernel check failed: see runner.py.)"""
    single = VmapCase(case.levels, (1,) * case.depth, case.entries)
    try:
        one = batched_sample(sample, single)
        fn = vmapped(ctx.target.call, single, one.kwargs, randomness, _out_dims(ctx.target))
        got, _ = ctx.run(fn, one)
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
    written = _written(ctx.target)
    with ctx.step("the op on one batch entry", sample, where):
        expected, expected_args = expected_call(op, sample, case, written)
    batched = batched_sample(sample, case)
    if layout is not None:
        batched = relayout_sample(batched, layout, sample.name)
    before = _stats(ctx.target)
    with ctx.step("vmap(op)", sample, where):
        actual = ctx.run(
            vmapped(op, case, batched.kwargs, randomness, _out_dims(ctx.target)),
            SampleInput(batched.args, name=sample.name),
        )
    path = _observed_path(ctx.target, before)
    for p in written:  # in-place results: each entry's slice as the op on that entry wrote it
        name = ctx.target.arg_names[p]
        found = compare(
            expected_args[p],
            actual[1][name],
            tolerance=ctx.tolerance,
            where=f"argument {name!r} after the call",
        )
        if found is not None:
            raise ctx.failure(
                f"vmap(op) wrote argument {name!r} differently from the op on each batch "
                "entry (does the batching rule write every entry's own result into its slice?)",
                sample,
                where,
                mismatch=found,
            )
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


class VmapOptions(TypedDict, total=False):
    """The vmap check's options: keywords of :func:`check_vmap`, ``check_op``'s
    ``options["vmap"]`` (defaults in :data:`VMAP`)."""

    nested: bool  #: also 2 and 3 nested vmaps
    randomness: str  #: vmap's ``randomness``: ``"error"``, ``"same"`` or ``"different"``
    require_fast: bool  #: fail when an opreg op's ``vmap_fn`` did not compute a case
    batch_entries: str  #: how batch entries are built (one of ``BATCH_ENTRIES``)
    layouts: bool  #: also transposed, strided and offset batched inputs


def _validate(options: VmapOptions) -> None:
    randomness = options["randomness"]
    if randomness not in ("error", "same", "different"):
        raise ValueError(f"randomness must be 'error', 'same' or 'different', got {randomness!r}")
    check_batch_entries(options["batch_entries"])


def run_vmap(ctx: CheckContext, options: VmapOptions) -> None:
    """The body of the vmap check (see :func:`check_vmap`)."""
    randomness, require_fast = options["randomness"], options["require_fast"]
    arg_names = ctx.target.arg_names
    mutated = [arg_names.index(n) for n in ctx.target.mutated_args if n in arg_names]
    paths: dict[str, int] = {}
    sources: dict[str, int] = {}
    rejected: dict[str, str] = {}
    for sample in ctx.samples:
        entries = batch_entries(sample, ctx.samples, options["batch_entries"])
        sources[entries.mode] = sources.get(entries.mode, 0) + 1
        cases = [
            c
            for c in vmap_cases(sample, nested=options["nested"], entries=entries)
            if _mutation_safe(c, mutated)
        ]
        for case in cases:
            path = _check_case(ctx, sample, case, randomness, require_fast)
            paths[path] = paths.get(path, 0) + 1
        for layout, variant in layout_variants(sample) if options["layouts"] and cases else []:
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


#: The vmap check, with its options' defaults.
VMAP = Check(
    "vmap",
    run_vmap,
    VmapOptions(
        nested=True, randomness="error", require_fast=True, batch_entries="auto", layouts=True
    ),
    _validate,
    budget=Budget(
        20,
        "it runs vmap(op) and the op on each batch entry for every sample, in_dims pattern "
        "and depth: fewer or smaller samples, or nested=False, make it faster",
    ),
)


def check_vmap(
    op: OpLike,
    samples: SamplesArg = None,
    *,
    device: str | torch.device | None = None,
    tolerance: ToleranceSpec = None,
    **options: Unpack[VmapOptions],
) -> CheckResult:
    """Check ``vmap(op)`` against the op applied to each batch entry and stacked.

    For every sample it tries in_dims 0, -1 and a middle dim on all tensor arguments, ``None``
    on each argument in turn, a mix, and (with ``nested=True``, the default) 2 and 3 nested
    vmaps mixing them; ``randomness`` (default ``"error"``) is passed to vmap.
    ``result.info["batching"]`` says which path ran (``"vmap_fn"``, ``"batching rule"``,
    ``"opreg per-sample loop"`` for an opreg op without ``vmap_fn``, ``"PyTorch per-sample
    fallback"``); with ``require_fast=True`` (default) an opreg op that
    has a ``vmap_fn`` fails if another path computed a case (within ``max_vmap_level``).
    ``batch_entries`` says how the entries of a batch are built from a sample: ``"auto"``
    (default), ``"variants"``, ``"permute"`` or ``"samples"`` (see :mod:`._vmap_cases`); with
    ``layouts=True`` (default) each sample is also run with transposed, strided and offset
    batched inputs. Raises :class:`CheckFailure` on the first difference.
    """
    return VMAP.check(op, samples, device, options, tolerance)
