"""How each case of the sweep ended, and the tally the tests assert on.

Categories (a case is one op, one sample, one way of running it, or one check_op check):

- ``pass``: opreg and the native op agree (or check_op passed/skipped the check);
- ``silent_mismatch``: both ran and the values differ. Must be 0;
- ``opreg_raises``: opreg raised where the native op works. Must be 0; a raise that matches
  a :data:`KNOWN_DEFECTS` entry is tagged with it, so the defects being fixed stand out;
- ``false_alarm``: check_op failed an op whose rules are the native op's own. Must be 0;
- ``torch_cant``: PyTorch itself can't (the native op raises too, or a documented torch limit
  of :data:`TORCH_LIMITS`, each shown by a test with ``torch.library.custom_op``): a clear
  error, never a wrong value;
- ``rule_cant``: a generic rule raises on its own on what opreg's documented contract gives
  it (:data:`RULE_CANT`, each shown by running the rule alone): the ``vmap_fn``
  (``torch.vmap`` of the native op over every tensor argument) with an unbatched argument
  expanded (:data:`EXPANDED_INPUT`: the native op cannot batch it at all, masked_select's
  mask), or with every argument batched where the native op has no batching rule
  (:data:`CANNOT_BATCH`); the backward run under vmap for the batched op
  (:data:`BACKWARD_UNDER_VMAP`). An author's rule must avoid that, or the op must loop (no
  ``vmap_fn``). A clear error from the user's own rule, never a wrong value; listed, not a
  defect of opreg's;
- ``not_expressible``: the sample cannot be registered as an op (the reason says why); per
  op and sample, not per case.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from opreg_testing import compare

CATEGORIES = (
    "pass",
    "silent_mismatch",
    "opreg_raises",
    "false_alarm",
    "torch_cant",
    "rule_cant",
    "not_expressible",
)
#: The categories that must stay empty.
MUST_BE_ZERO = ("silent_mismatch", "opreg_raises", "false_alarm")


@dataclass(frozen=True)
class Pattern:
    """A known failure, recognised by a regular expression on its message."""

    key: str
    regex: str
    what: str
    cases: str = ""  #: a regular expression the case's name must match ("": any case)

    def matches(self, message: str, case: str = "") -> bool:
        if self.cases and re.search(self.cases, case) is None:
            return False
        return re.search(self.regex, message, re.S) is not None


#: opreg defects being fixed (issue 20): a raise matching one is still ``opreg_raises``.
KNOWN_DEFECTS = (
    Pattern(
        "a:jvp-rule-uses-torch.func",
        r"savedLocalDispatchKeySet_",
        "a jvp rule that itself uses a torch.func transform raises a PyTorch INTERNAL ASSERT "
        "under torch.func.jvp/jacfwd/hessian/vmap(jvp)",
    ),
    Pattern(
        "b:grad-vmap-expanded-input",
        r"Expected \w+\.is_contiguous",
        "grad(vmap(op)) with an unbatched input passes an expanded stride-0 tensor to the backward",
        cases=r"grad\(vmap|vmap\(grad\)|check_op:autograd",
    ),
)

#: Found by this sweep, not by a regular expression: opreg raises in a vmap with an unbatched
#: argument, and the generic vmap_fn raises the same on its own when that argument arrives
#: expanded to the batch, as opreg's vmap_fn contract says (transforms.expanded_rule_error):
#: filed as ``rule_cant``.
EXPANDED_INPUT = Pattern(
    "c:vmap_fn-gets-expanded-input",
    r"(evidence, not a pattern)",
    "vmap_fn receives every tensor argument batched, the unbatched ones expanded (stride 0) "
    "as documented; torch.vmap of a native op that cannot batch that argument at all "
    "(masked_select's mask, a data-dependent check on it) then raises where vmap of the "
    "native op with in_dims None works: the rule must leave that argument out of its vmap",
)

#: Found by this sweep, like :data:`EXPANDED_INPUT`: with every tensor argument batched, the
#: generic vmap_fn (``torch.vmap`` of the native op) raises on its own, where the native op
#: under ``vmap(grad)`` works only because grad decomposes it first (column_stack).
CANNOT_BATCH = Pattern(
    "d:vmap_fn-cannot-batch",
    r"(evidence, not a pattern)",
    "torch.vmap of the native op raises with every argument batched (it has no batching rule "
    "and no fallback: column_stack); vmap(grad(native)) works only because grad decomposes the "
    "composite op before vmap sees it. opreg's batched op runs vmap_fn, so the rule raises "
    "on its own: an author writes no vmap_fn (opreg loops) or a rule that batches",
)

#: Found by this sweep: the batched op's backward is ``vmap`` of the user's backward
#: (docs/semantics.md), and the generic backward (``torch.func.vjp`` of the native op) raises
#: on its own when run under vmap at those in_dims (transforms.backward_under_vmap_error).
BACKWARD_UNDER_VMAP = Pattern(
    "e:backward-under-vmap",
    r"(evidence, not a pattern)",
    "the batched op's backward is vmap of the user's backward, as documented; the generic "
    "backward (torch.func.vjp of the native op) cannot run under vmap: the native op's own "
    "backward formula calls .item() (scatter_reduce/index_reduce with prod), as "
    "vmap(grad(native)) raises too. An author writes a backward that vmap can run",
)

#: The ``rule_cant`` evidences: the generic rule raises on its own under opreg's contract.
RULE_CANT = (EXPANDED_INPUT, CANNOT_BATCH, BACKWARD_UNDER_VMAP)

#: Documented torch limits that an opreg op hits exactly as a ``torch.library.custom_op``
#: does (tests/opinfo/test_torch_limits.py shows each with a custom_op).
TORCH_LIMITS = (
    Pattern(
        "layout-dependent-op",
        r"(evidence, not a pattern)",
        "the native op's result depends on its input's memory layout (as_strided: OpInfo "
        "skips its test_noncontiguous_samples), so check_op's non-contiguous batched inputs "
        "and per-entry views legitimately give other values",
    ),
    Pattern(
        "native-vmap-wrong-value",
        r"(evidence, not a pattern)",
        "torch.vmap of the native op gives a wrong value where opreg matches the per-sample "
        "loop (select_scatter: grad(vmap) of an unbatched src, 5x the loop's gradient)",
    ),
    Pattern(
        "batch-entry-outside-domain",
        r"(on one batch entry|per batch entry) raised",
        "a batch entry that check_op made from the sample (values scaled and permuted) is "
        "outside the native op's domain (e.g. not positive-definite for cholesky): the "
        "native op raises on it, called alone",
        cases=r"^check_op:",
    ),
    Pattern(
        "func.jvp-inside-dual_level",
        r"Nested forward mode AD is not supported",
        "torch.func.jvp (here: inside the jvp rule) cannot run while a "
        "torch.autograd.forward_ad.dual_level is open (gradcheck's check_forward_ad)",
    ),
    Pattern(
        "native-fake-of-data-dependent-output",
        r"PendingUnbackedSymbolNotFound",
        "the generic fake runs the native op on fake tensors; for an output whose shape depends "
        "on tensor data (tensor_split at tensor indices) the native op's meta allocates unbacked "
        "sizes that Dynamo cannot bind to a custom op's outputs: torch.library.custom_op with the "
        "same fake raises the same under torch.compile (a fake written with "
        "torch.library.get_ctx().new_dynamic_size() compiles, with opreg too)",
        cases=r"compile",
    ),
    Pattern(
        "vmap-inside-custom-op-under-compile",
        r"querying is_contiguous inside of vmap|Cannot access data pointer of Tensor that "
        r"doesn't have storage",
        "torch.vmap inside a custom op's kernel at run time of a torch.compile'd graph "
        "(aot_eager): torch 2.13 raises for torch.library.custom_op too (and the sweep saw "
        "one process crash), so check_op's compile check runs without vmap(op)",
        cases=r"compile",
    ),
)


def first_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


@dataclass
class Case:
    """One outcome of the sweep."""

    op: str
    sample: int
    case: str
    category: str
    reason: str = ""
    defect: str = ""  #: a KNOWN_DEFECTS key for an opreg raise that matches one
    limit: str = ""  #: a TORCH_LIMITS key for a documented torch limit


@dataclass
class Tally:
    """Every outcome of a sweep, with the counts and a per-op table."""

    cases: list[Case] = field(default_factory=list)
    skipped_ops: dict[str, str] = field(default_factory=dict)  #: op -> why it did not run
    #: (op, sample, transform) -> why that transform does not apply (no float output, ...)
    not_applicable: dict[str, str] = field(default_factory=dict)

    def add(self, case: Case) -> Case:
        self.cases.append(case)
        return case

    def counts(self) -> Counter[str]:
        c: Counter[str] = Counter({k: 0 for k in CATEGORIES})
        c.update(x.category for x in self.cases)
        return c

    def by_defect(self) -> Counter[str]:
        return Counter(
            x.defect or "(no known defect)" for x in self.cases if x.category == "opreg_raises"
        )

    def ops(self) -> set[str]:
        return {x.op for x in self.cases if x.category != "not_expressible"}

    def of(self, category: str) -> list[Case]:
        return [x for x in self.cases if x.category == category]

    def summary(self) -> str:
        c = self.counts()
        defects = ", ".join(f"{k}={v}" for k, v in sorted(self.by_defect().items()))
        return (
            f"opinfo sweep: {len(self.ops())} ops, {len(self.cases)} cases: "
            f"pass={c['pass']} silent_mismatch={c['silent_mismatch']} "
            f"opreg_raises={c['opreg_raises']} false_alarm={c['false_alarm']} "
            f"torch_cant={c['torch_cant']} rule_cant={c['rule_cant']} "
            f"not_expressible={c['not_expressible']} "
            f"skipped_ops={len(self.skipped_ops)}"
            + (f" | opreg_raises by known defect: {defects}" if defects else "")
        )

    def failures(self) -> str:
        """The cases of the must-be-zero categories, one line each."""
        return "\n".join(
            f"{x.category:16} {x.op}[{x.sample}] {x.case}: "
            + (f"[defect {x.defect}] " if x.defect else "")
            + x.reason
            for x in self.cases
            if x.category in MUST_BE_ZERO
        )

    def to_json(self) -> dict[str, Any]:
        table: dict[str, dict[str, Any]] = {}
        for x in self.cases:
            row = table.setdefault(x.op, {"counts": Counter(), "cases": []})
            row["counts"][x.category] += 1
            if x.category != "pass":
                row["cases"].append(asdict(x))
        return {
            "summary": self.summary(),
            "counts": dict(self.counts()),
            "opreg_raises_by_defect": dict(self.by_defect()),
            "known_defects": {p.key: p.what for p in (*KNOWN_DEFECTS, *RULE_CANT)},
            "torch_limits": {p.key: p.what for p in TORCH_LIMITS},
            "skipped_ops": self.skipped_ops,
            "not_applicable": self.not_applicable,
            "ops": {
                op: {"counts": dict(r["counts"]), "cases": r["cases"]}
                for op, r in sorted(table.items())
            },
        }

    def write(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f, indent=1, sort_keys=False)


def _run(fn: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    try:
        return fn(), None
    except Exception as exc:  # every raise is an outcome to classify
        return None, exc


def classify_raise(exc: BaseException, case: str) -> tuple[str, str, str]:
    """``(category, defect, limit)`` for an opreg raise (in ``case``) where the native op works."""
    message = f"{type(exc).__name__}: {exc}"
    for p in TORCH_LIMITS:
        if p.matches(message, case):
            return "torch_cant", "", p.key
    for p in KNOWN_DEFECTS:
        if p.matches(message, case):
            return "opreg_raises", p.key, ""
    return "opreg_raises", "", ""


def compare_run(
    op: str,
    sample: int,
    case: str,
    native: Callable[[], Any],
    opreg: Callable[[], Any],
    tolerance: Any = None,
    reference: Callable[[], Any] | None = None,
) -> Case:
    """Run ``opreg`` and ``native`` and classify: pass, mismatch, opreg raises, torch can't.

    On a mismatch, ``reference`` (the native op without torch.vmap: a per-sample loop) says
    who is right: opreg matching it while the native op does not is a torch bug."""
    actual, opreg_exc = _run(opreg)
    expected, native_exc = _run(native)
    if native_exc is not None:
        note = "opreg raises too" if opreg_exc is not None else "opreg returned a value"
        return Case(
            op, sample, case, "torch_cant", f"native raises {first_line(native_exc)} ({note})"
        )
    if opreg_exc is not None:
        category, defect, limit = classify_raise(opreg_exc, case)
        return Case(op, sample, case, category, first_line(opreg_exc), defect, limit)
    mismatch = compare(expected, actual, tolerance=tolerance)
    if mismatch is not None and reference is not None:
        truth, ref_exc = _run(reference)
        if ref_exc is None and compare(truth, actual, tolerance=tolerance) is None:
            wrong = compare(truth, expected, tolerance=tolerance)
            reason = (
                "torch.vmap of the native op computes a wrong value (a PyTorch bug); opreg "
                f"matches the per-sample loop: native {wrong}"
            )
            return Case(op, sample, case, "torch_cant", reason, limit="native-vmap-wrong-value")
    if mismatch is not None:
        return Case(op, sample, case, "silent_mismatch", str(mismatch))
    return Case(op, sample, case, "pass")
