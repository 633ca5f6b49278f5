"""vmap check: ``vmap(op)`` equals the op stacked over the batch, for many in_dims and nestings.

It also reports which batching path computed the result: an opreg op's ``vmap_fn`` (the fast
rule; read from the op's ``vmap_stats``), another batching rule, or PyTorch's per-sample
fallback loop (no kernel on ``FuncTorchBatched``).
"""

from __future__ import annotations

import torch

from opreg_core import SampleInput

from ..compare import ToleranceSpec
from ..report import CheckResult
from ..samples import SamplesArg
from ..target import OpLike, Target
from ._batching import VmapCase, batched_sample, expected_output, vmap_cases, vmapped
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


def _check_case(
    ctx: CheckContext, sample: SampleInput, case: VmapCase, randomness: str, require_fast: bool
) -> str:
    op = ctx.target.call
    where = str(case)
    with ctx.step("the op on one batch entry", sample, where):
        expected = expected_output(op, sample, case)
    batched = batched_sample(sample, case)
    before = _stats(ctx.target)
    with ctx.step("vmap(op)", sample, where):
        actual = ctx.run(
            vmapped(op, case, batched.kwargs, randomness),
            SampleInput(batched.args, name=sample.name),
        )
    path = _observed_path(ctx.target, before)
    ctx.assert_same(
        (expected, {}),
        (actual[0], {}),
        sample,
        where,
        "vmap(op) differs from the op stacked over the batch",
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


def run_vmap(
    ctx: CheckContext, *, nested: bool = True, randomness: str = "error", require_fast: bool = True
) -> None:
    """The body of the vmap check (see :func:`check_vmap`)."""
    arg_names = ctx.target.arg_names
    mutated = [arg_names.index(n) for n in ctx.target.mutated_args if n in arg_names]
    paths: dict[str, int] = {}
    for sample in ctx.samples:
        for case in vmap_cases(sample, nested=nested):
            if _mutation_safe(case, mutated):
                path = _check_case(ctx, sample, case, randomness, require_fast)
                paths[path] = paths.get(path, 0) + 1
    if not paths:
        raise Skip("no sample has a tensor argument that vmap can batch")
    ctx.info["cases"] = sum(paths.values())
    ctx.info["paths"] = paths
    ctx.info["batching"] = next(iter(paths)) if len(paths) == 1 else "mixed"


def check_vmap(
    op: OpLike,
    samples: SamplesArg = None,
    *,
    device: str | torch.device | None = None,
    nested: bool = True,
    randomness: str = "error",
    require_fast: bool = True,
    tolerance: ToleranceSpec = None,
) -> CheckResult:
    """Check ``vmap(op)`` against the op applied to each batch entry and stacked.

    For every sample it tries in_dims 0, -1 and a middle dim on all tensor arguments, ``None``
    on each argument in turn, a mix, and (with ``nested``) 2 and 3 nested vmaps mixing them.
    ``result.info["batching"]`` says which path ran (``"vmap_fn"``, ``"batching rule"``,
    ``"PyTorch per-sample fallback"``); with ``require_fast`` an opreg op that has a
    ``vmap_fn`` fails if another path computed a case (within ``max_vmap_level``).
    Raises :class:`CheckFailure` on the first difference.
    """
    if randomness not in ("error", "same", "different"):
        raise ValueError(f"randomness must be 'error', 'same' or 'different', got {randomness!r}")
    ctx = prepare("vmap", op, samples, device, tolerance)
    return run_public(
        ctx, lambda c: run_vmap(c, nested=nested, randomness=randomness, require_fast=require_fast)
    )
