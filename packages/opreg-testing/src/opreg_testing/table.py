"""Plain-text rendering of check reports: the op x check table and the details under it."""

from __future__ import annotations

from collections.abc import Sequence

from .report import CheckResult, OpReport

_WORDS = {"passed": "pass", "failed": "FAIL", "skipped": "skip"}


def duration(seconds: float) -> str:
    """``1.30s``; under 10 ms in milliseconds (``3ms``), so that a fast check never reads
    ``0.00s`` (a check that fails at its first sample takes a few milliseconds)."""
    return f"{seconds:.2f}s" if seconds >= 0.01 else f"{seconds * 1000:.0f}ms"


def cell(result: CheckResult | None) -> str:
    """``pass 0.12s``, ``FAIL 3ms`` or ``skip``; ``-`` for a check that did not run."""
    if result is None:
        return "-"
    word = _WORDS[result.status]
    return word if result.skipped else f"{word} {duration(result.duration)}"


def _find(report: OpReport, check: str) -> CheckResult | None:
    return next((r for r in report.results if r.check == check), None)


def render_table(reports: Sequence[OpReport], checks: Sequence[str]) -> str:
    """One row per op and device, one column per check."""
    header = ["op", "device", *checks]
    rows = [[r.op, r.device, *(cell(_find(r, c)) for c in checks)] for r in reports]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(
            text.ljust(width) for text, width in zip(row, widths, strict=True)
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def render_details(reports: Sequence[OpReport]) -> str:
    """Failures in full, skip reasons, notes (e.g. once differentiable, not checked, over
    the time budget) and vmap batching paths, one section each."""
    failures = [
        f"{r.device}: {result.failure}"
        for r in reports
        for result in r.results
        if result.failure is not None
    ]
    skips = [
        f"  {r.op} [{r.device}] {result.check}: {result.reason}"
        for r in reports
        for result in r.results
        if result.skipped
    ]
    notes = [
        f"  {r.op} [{r.device}] {result.check}: {note}"
        for r in reports
        for result in r.results
        for note in result.notes
    ]
    batching = [
        f"  {r.op} [{r.device}]: {result.info['batching']} ({result.info.get('cases', 0)} cases)"
        for r in reports
        for result in r.results
        if result.check == "vmap" and "batching" in result.info
    ]
    sections = []
    if failures:
        sections.append("Failures:\n" + "\n\n".join(failures))
    if skips:
        sections.append("Skipped:\n" + "\n".join(skips))
    if notes:
        sections.append("Notes:\n" + "\n".join(notes))
    if batching:
        sections.append("vmap batching path:\n" + "\n".join(batching))
    return "\n\n".join(sections)


def counts(reports: Sequence[OpReport]) -> dict[str, int]:
    """How many checks passed, failed and were skipped."""
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    for report in reports:
        for result in report.results:
            totals[result.status] += 1
    return totals


def summary_line(reports: Sequence[OpReport]) -> str:
    """``3 passed, 1 failed, 2 skipped (3 ops, 1 not checked)``."""
    c = counts(reports)
    ops = len({r.op for r in reports})
    unchecked = sum(1 for r in reports if r.ok and not r.checked)
    note = f", {unchecked} not checked" if unchecked else ""
    return f"{c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped ({ops} ops{note})"
