"""The sweep: every OpInfo op of ``op_db`` (or a selection), each sample registered as an opreg
op with the generic rules, run every way against the native op, then through ``check_op``.

Run it through pytest (tests/opinfo/test_sweep.py), which prints the summary line and writes
the per-op table.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from opreg_core import SampleInput
from opreg_testing import OPCHECK_UTILS, check_op, fresh_namespace

from .build import (
    NotExpressible,
    OpCase,
    build_case,
    destroy_twin,
    is_float,
    pick_dtype,
    register,
    register_twin,
)
from .outcomes import (
    BACKWARD_UNDER_VMAP,
    CANNOT_BATCH,
    EXPANDED_INPUT,
    Case,
    Tally,
    classify_raise,
    compare_run,
    first_line,
)
from .transforms import (
    TRANSFORMS,
    UNBATCHED_IN_DIMS,
    applicable,
    backward_under_vmap_error,
    expanded_rule_error,
    loop_vmap,
    native_vmap_error,
    native_vmap_vs_loop,
    why_not,
)

#: check_op options: the compile check on aot_eager (no code generation, CPU only), without
#: ``vmap(op)``: the generic ``vmap_fn`` is ``torch.vmap`` of the native op, and torch.vmap
#: inside a custom op at run time of a compiled graph is a torch limit (TORCH_LIMITS
#: "vmap-inside-custom-op-under-compile"; it raised here, and once crashed the process). The
#: export check without ``vmap(op)`` too: vmap of these ops is the vmap check's, which
#: classifies batches the native op itself rejects (embedding_bag's offsets); the export check
#: would report them as opreg raising.
CHECK_OPTIONS = {
    "compile": {"backend": "aot_eager", "vmap": False},
    "export": {"vmap": False},
}
#: The case recorded for that documented skip, once per registered op.
SKIPPED_COMPILE_VMAP = "check_op:compile(vmap(op))"


def op_db() -> list[Any]:
    """PyTorch's OpInfo database (imported on first use: it takes seconds)."""
    import importlib.util

    if importlib.util.find_spec("expecttest") is None:
        raise RuntimeError(
            "the OpInfo sweep needs expecttest, which torch.testing._internal imports: "
            "pip install expecttest (the hatch test environments have it)"
        )
    from torch.testing._internal.common_methods_invocations import op_db as db

    return list(db)


def full_name(opinfo: Any) -> str:
    return opinfo.name + (f".{opinfo.variant_test_name}" if opinfo.variant_test_name else "")


def samples(opinfo: Any, dtype: torch.dtype, limit: int, tally: Tally) -> Iterator[tuple[int, Any]]:
    """The first ``limit`` samples of ``opinfo`` on CPU; a generator that raises is recorded in
    ``tally.skipped_ops`` (only the generator's own raise: the sweep's are not caught)."""
    name = full_name(opinfo)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        try:
            it = iter(opinfo.sample_inputs("cpu", dtype, requires_grad=False))
        except Exception as exc:  # OpInfo's sample generator itself
            tally.skipped_ops[name] = f"sample_inputs raises {first_line(exc)}"
            return
        for i in range(limit):
            try:
                sample = next(it)
            except StopIteration:
                return
            except Exception as exc:
                tally.skipped_ops[name] = f"sample_inputs raises {first_line(exc)}"
                return
            yield i, sample


def _check_options(case: OpCase) -> dict[str, Any]:
    # Second order where the native op has it (OpInfo's supports_gradgrad): a documented skip.
    return {**CHECK_OPTIONS, "autograd": {"gradgrad": case.supports_gradgrad}}


def _run_check_op(op: Any, case: OpCase, checks: Any = None) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return check_op(
            op, [SampleInput(case.args)], checks=checks, options=_check_options(case), device="cpu"
        )


def twin_result(case: OpCase, check: str) -> str | None:
    """The failure of ``check`` on the :func:`register_twin` of ``case`` (None: it passes).

    The twin is no baseline for every check: its ``register_vmap`` rule (``torch.vmap`` of the
    op) hits the INTERNAL ASSERT of KNOWN_DEFECTS "a" in torch itself, and
    ``register_autograd`` raises under ``torch.func.grad``; only the same problem counts
    (:func:`same_problem`)."""
    with fresh_namespace("opinfo_twin") as ns:
        twin = register_twin(case, ns.qualname("twin"))
        try:
            if check == "opcheck" and case.differentiable:
                return _twin_opcheck(twin, case)
            result = _run_check_op(twin, case, [check])[check]
        finally:
            destroy_twin(twin)
    return str(result.failure) if result.failed else None


def _twin_opcheck(twin: Any, case: OpCase) -> str | None:
    """The opcheck check on the twin, with the floating inputs also requiring grad as the
    check runs it on an opreg op with a backward (check_op cannot know that a custom_op has
    one, so on the twin it would skip those runs): the first failure, in the check's words."""
    plain = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in case.args)
    grad = tuple(a.clone().requires_grad_() if is_float(a) else a for a in case.args)
    for args in (plain, grad):
        for util in OPCHECK_UTILS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                outcome = torch.library.opcheck(twin, args, test_utils=util, raise_exception=False)[
                    util
                ]
            if outcome != "SUCCESS":
                what = f"{type(outcome).__name__}: {outcome}"
                return f"problem: {util} failed: {what}"
    return None


def check_op_cases(case: OpCase, op: Any, tally: Tally) -> None:
    """check_op on the registered op; each failed check is classified.

    A failure matching a known opreg defect or documented torch limit is filed there. Any
    other failed check is run again on the same op built with ``torch.library.custom_op``
    (:func:`register_twin`): failing there too makes it ``torch_cant``. Passing there makes it
    ``opreg_raises`` when the check says the op raised, else a ``false_alarm`` (a complaint
    about values on rules that are the native op's own; triage: a false alarm, or a wrong
    value that the comparisons missed).
    """
    report = _run_check_op(op, case)
    for r in report.results:
        label = f"check_op:{r.check}"
        if not r.failed:
            tally.add(Case(case.name, case.sample_index, label, "pass", r.reason))
            continue
        message = str(r.failure)
        category, defect, limit = classify_raise(RuntimeError(message), label)
        reason = _short(message)
        outcome = Case(case.name, case.sample_index, label, category, reason, defect, limit)
        levels = _failed_levels(message, len(case.args))
        in_dims = levels[0] if levels else None
        if in_dims is not None and category == "opreg_raises" and not defect:
            exc = native_vmap_error(case, levels, grad="grad(op)" in message)
            if exc is not None:
                category = "torch_cant"
                reason = f"vmap of the native op raises too: {first_line(exc)} | {reason}"
        if in_dims is not None and category in ("opreg_raises", "false_alarm"):
            rule_evidence(case, outcome, in_dims, message)
            category, defect = outcome.category, outcome.defect
        if in_dims is not None and category == "opreg_raises" and not _raised(message):
            wrong = native_vmap_vs_loop(case, in_dims)
            if wrong is not None:
                category = "torch_cant"
                reason = f"vmap of the native op differs from its per-sample loop too: {wrong}"
        if category == "opreg_raises" and case.layout_dependent and not _raised(message):
            category, limit = "torch_cant", "layout-dependent-op"
        if category == "opreg_raises" and not defect:
            twin = twin_result(case, r.check)
            if twin is not None and same_problem(message, twin):
                category = "torch_cant"
                reason = f"the torch.library.custom_op twin fails too: {_short(twin)}"
            elif not _raised(message):
                category = "false_alarm"  # a complaint about values that the twin passes
        tally.add(Case(case.name, case.sample_index, label, category, reason, defect, limit))


def _looped(transform: Any, case: OpCase) -> Any:
    with loop_vmap():
        return transform(case.fallback, case)


def rule_evidence(
    case: OpCase, outcome: Case, in_dims: tuple[int | None, ...], message: str = ""
) -> None:
    """File an opreg raise as ``rule_cant`` when a generic rule raises the same on its own
    under opreg's contract (outcomes.RULE_CANT): the vmap_fn with the unbatched arguments
    expanded (transforms.expanded_rule_error), or with every argument batched; the backward
    under vmap, for a case with a gradient (transforms.backward_under_vmap_error)."""
    if outcome.category not in ("opreg_raises", "false_alarm"):
        return
    if outcome.defect and outcome.defect.startswith("a:"):
        return
    said = " ".join((message or outcome.reason).split())
    expanded = any(in_dims[i] is None for i in case.tensor_pos)
    exc = expanded_rule_error(case, in_dims)
    if exc is not None and _gist(first_line(exc)) in said:
        outcome.category = "rule_cant"
        outcome.defect = (EXPANDED_INPUT if expanded else CANNOT_BATCH).key
        return
    if "grad" not in outcome.case and "grad(op)" not in said:
        return
    exc = backward_under_vmap_error(case, in_dims)
    if exc is not None and _gist(first_line(exc)) in said:
        outcome.category, outcome.defect = "rule_cant", BACKWARD_UNDER_VMAP.key


def _gist(text: str) -> str:
    """The start of an error's message, spaces squeezed (check messages re-wrap lines)."""
    return " ".join(text.split(":", 1)[-1].split())[:50] if ":" in text else " ".join(text.split())


def _failed_levels(message: str, nargs: int) -> list[tuple[int | None, ...]]:
    """The ``in_dims`` of each vmap level of a check_op failure's case, outermost first, from
    its message ([]: none)."""
    levels = []
    for found in re.finditer(r"in_dims=\(([^)]*)\)", message.split("problem:", 1)[0]):
        parts = [p.strip() for p in found.group(1).split(",") if p.strip()]
        if len(parts) != nargs or not all(p == "None" or p.lstrip("-").isdigit() for p in parts):
            return []
        levels.append(tuple(None if p == "None" else int(p) for p in parts))
    return levels


def _problem(message: str) -> str:
    """The error of a check failure's ``problem:`` line (what raised, or what differs)."""
    problem = " ".join(message.split("problem:", 1)[-1].split())
    return problem.split(" raised ", 1)[-1][:80]


def same_problem(ours: str, twins: str) -> bool:
    """Whether two check failures report the same problem (same case kind and error)."""
    return _problem(ours) == _problem(twins)


def _raised(message: str) -> bool:
    """Whether a check failure says the op raised (rather than computed a wrong value)."""
    problem = message.split("problem:", 1)[-1]
    failed = re.search(r"failed: (?!AssertionError)\w+(Error|Exception)", problem)
    return " raised " in problem or failed is not None


def _short(message: str) -> str:
    """A check failure's message on one line: its first lines (case, problem)."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    return " / ".join(lines[:5])[:700]


def sweep_case(case: OpCase, tally: Tally, run_check_op: bool, **overrides: Any) -> None:
    """Register ``case`` in a fresh namespace (``overrides`` replace some of its generic rules:
    the mutants), run every transform both ways, then check_op; unregister it."""
    with fresh_namespace("opinfo") as ns:
        try:
            op = register(case, ns.qualname("op"), **overrides)
        except Exception as exc:
            reason = f"register_vmap_op raises {first_line(exc)}"
            tally.add(Case(case.name, case.sample_index, "register", "not_expressible", reason))
            return
        for name in TRANSFORMS:
            why = why_not(case, name)
            if why is not None:
                tally.not_applicable[f"{case.label} {name}"] = why
        for name, transform in applicable(case):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                outcome = compare_run(
                    case.name,
                    case.sample_index,
                    name,
                    lambda t=transform: t(case.fallback, case),
                    lambda t=transform: t(op, case),
                    reference=lambda t=transform: _looped(t, case),
                )
                if name in UNBATCHED_IN_DIMS:
                    rule_evidence(case, outcome, UNBATCHED_IN_DIMS[name](case))
            tally.add(outcome)
        if run_check_op:
            check_op_cases(case, op, tally)
            reason = "documented skip: torch.vmap inside a custom op under compile"
            limit = "vmap-inside-custom-op-under-compile"
            tally.add(
                Case(
                    case.name,
                    case.sample_index,
                    SKIPPED_COMPILE_VMAP,
                    "torch_cant",
                    reason,
                    limit=limit,
                )
            )


def sweep(
    opinfos: Iterable[Any],
    samples_per_op: int,
    run_check_op: bool = True,
    tally: Tally | None = None,
) -> Tally:
    """Sweep ``opinfos``: up to ``samples_per_op`` expressible samples of each."""
    tally = Tally() if tally is None else tally
    for opinfo in opinfos:
        name = full_name(opinfo)
        dtype = pick_dtype(opinfo)
        if dtype is None:
            supported = sorted(str(d) for d in opinfo.supported_dtypes("cpu"))
            tally.skipped_ops[name] = f"no real dtype on CPU (supports: {supported or 'none'})"
            continue
        done = 0
        for index, sample in samples(opinfo, dtype, 4 * samples_per_op, tally):
            if done >= samples_per_op:
                break
            try:
                case = build_case(opinfo, sample, index, dtype)
            except NotExpressible as exc:
                tally.add(Case(name, index, "build", "not_expressible", str(exc)))
                continue
            except Exception as exc:  # the native op on its own sample
                reason = f"the native op raises on its sample: {first_line(exc)}"
                tally.add(Case(name, index, "build", "torch_cant", reason))
                continue
            sweep_case(case, tally, run_check_op)
            done += 1
    return tally
