"""The mutation corpus: every wrong op is caught by the check it names, with a message naming
the op, the check and the case; every correct op passes every check (no false alarm, and not
"nothing checked"). The score is printed at the end of the run (see conftest.py).

Mutants marked ``needs`` rely on work elsewhere in issue 10 (distinct vmap batch entries,
layout variants, the core's gradient reduction); they are expected to be caught all the same.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import opreg_mutation_corpus as corpus
import pytest

from opreg_testing import OpNamespace, OpReport, check_op, triton_device

#: Every corpus run compiles with aot_eager: the point is the op, not Inductor's code.
_BASE_OPTIONS: Mapping[str, Mapping[str, Any]] = {"compile": {"backend": "aot_eager"}}


def _triton_missing() -> str | None:
    """Why the corpus' Triton kernels cannot run on CPU here, or None if they can."""
    try:
        installed = importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):  # e.g. imports of it blocked (sys.modules entry None)
        installed = False
    if not installed:
        return "Triton is not installed"
    if os.environ.get("TRITON_INTERPRET") != "1":
        return "Triton's interpreter is off (TRITON_INTERPRET=1 runs the kernels on CPU)"
    import opreg_kernels

    if not opreg_kernels.has_triton():
        return "Triton is disabled or fails to import (opreg_kernels.has_triton() is False)"
    return None


def _options(extra: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    merged = {check: dict(opts) for check, opts in _BASE_OPTIONS.items()}
    for check, opts in extra.items():
        merged[check] = {**merged.get(check, {}), **opts}
    return merged


@contextmanager
def _triton_on_cpu(op: Any, wanted: bool) -> Iterator[None]:
    """The op's Triton kernels serve CPU tensors (Triton's interpreter) for the block."""
    if not wanted:
        yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "interpreter set after import"
        with triton_device("cpu", [op]):
            yield


def _run(
    op: Any, checks: Iterable[str] | None, options: Mapping[str, Any], triton: bool
) -> OpReport:
    with _triton_on_cpu(op, triton):
        return check_op(op, checks=checks, options=_options(options))


def _judge_mutant(report: OpReport, check: str) -> tuple[bool, str]:
    """Whether the check failed with a message naming the op, the check and the case."""
    result = report[check]
    if not result.failed or result.failure is None:
        return False, f"the {check} check {result.status}" + (
            f": {result.reason}" if result.reason else ""
        )
    failure = result.failure
    message = str(failure)
    headline = f"opreg {check} check failed for {report.op}"
    if not message.startswith(headline):
        return False, f"the message does not start with {headline!r}: {message!r}"
    if not failure.case or f"case:   {failure.case}" not in message:
        return False, f"the message names no case: {message!r}"
    return True, failure.summary()


@pytest.mark.parametrize("mutant", corpus.MUTANTS, ids=lambda m: m.name)
def test_mutant_is_caught(
    mutant: corpus.Mutant, opreg_namespace: OpNamespace, mutation_score: Any
) -> None:
    if mutant.triton:
        missing = _triton_missing()
        if missing is not None:
            mutation_score.skipped[mutant.name] = missing
            pytest.skip(f"Triton mutant: {missing}")
    op = mutant.build(opreg_namespace)
    report = _run(op, [mutant.check], mutant.options, mutant.triton)
    caught, detail = _judge_mutant(report, mutant.check)
    mutation_score.mutants[mutant.name] = {
        "check": mutant.check,
        "wrong": mutant.wrong,
        "caught": caught,
        "detail": detail,
        "needs": mutant.needs,
    }
    assert caught, (
        f"mutant {mutant.name!r} ({mutant.wrong}) was not caught by the {mutant.check} check: "
        f"{detail}" + (f" (needs: {mutant.needs})" if mutant.needs else "")
    )


def _judge_correct(report: OpReport) -> tuple[bool, str]:
    """A false alarm: any failure, or nothing checked at all."""
    failures = report.failures
    if failures:
        return True, "; ".join(f"{f.check}: {f.summary()}" for f in failures)
    if not any(r.passed for r in report.results):
        reasons = "; ".join(f"{r.check}: {r.reason}" for r in report.results)
        return True, f"nothing checked ({reasons})"
    return False, ", ".join(f"{r.check} {r.status}" for r in report.results)


@pytest.mark.parametrize("entry", corpus.CORRECT, ids=lambda c: c.name)
def test_correct_op_has_no_false_alarm(
    entry: corpus.CorrectOp, opreg_namespace: OpNamespace, mutation_score: Any
) -> None:
    missing = _triton_missing() if entry.triton != "none" else None
    if missing is not None and entry.triton == "required":
        mutation_score.skipped[entry.name] = missing
        pytest.skip(f"Triton op: {missing}")
    op = entry.build(opreg_namespace)
    report = _run(op, None, entry.options, entry.triton != "none" and missing is None)
    false_alarm, detail = _judge_correct(report)
    mutation_score.correct[entry.name] = {
        "what": entry.what,
        "false_alarm": false_alarm,
        "detail": detail,
        "needs": entry.needs,
    }
    assert not false_alarm, f"false alarm on the correct op {entry.name!r} ({entry.what}): {detail}"


def test_corpus_is_large_enough() -> None:
    """Issue 10's proof asks for at least 40 mutants covering every check and 20 correct ops."""
    from opreg_testing import ALL_CHECKS

    assert len(corpus.MUTANTS) >= 40 and len(corpus.CORRECT) >= 20
    assert {m.check for m in corpus.MUTANTS} == set(ALL_CHECKS)
    names = [m.name for m in corpus.MUTANTS] + [c.name for c in corpus.CORRECT]
    assert len(names) == len(set(names))
