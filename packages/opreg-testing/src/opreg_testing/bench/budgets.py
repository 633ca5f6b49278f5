"""Budgets for CI: ``--max-ratio kernel/compiled=1.0`` fails a run (exit 1) when a row's
ratio exceeds its limit, naming the op, the row and the figure. Imports no torch."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .report import BenchReport
from .rows import RATIOS


@dataclass(frozen=True)
class Violation:
    """A ratio over its budget in one row."""

    op: str
    device: str
    section: str
    row: str
    ratio: str
    value: float
    limit: float
    detail: str

    @property
    def message(self) -> str:
        return (
            f"{self.op} on {self.device}, {self.section} row {self.row}: {self.ratio} = "
            f"{self.value:.3f} > {self.limit:g} ({self.detail})"
        )


def parse_budget(text: str) -> tuple[str, float]:
    """``kernel/compiled=1.0`` -> (``"kernel/compiled"``, 1.0); ``ValueError`` naming the
    ratios for a bad one."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or name not in RATIOS:
        raise ValueError(
            f"bad budget {text!r}: write RATIO=LIMIT with RATIO one of {', '.join(RATIOS)}"
        )
    try:
        limit = float(value)
    except ValueError:
        raise ValueError(
            f"bad budget {text!r}: the limit {value.strip()!r} is not a number"
        ) from None
    if limit < 0:
        raise ValueError(f"bad budget {text!r}: the limit must be >= 0")
    return name, limit


def parse_budgets(texts: Iterable[str]) -> dict[str, float]:
    """Several budgets (each may list several, comma-separated); a later one wins."""
    found: dict[str, float] = {}
    for text in texts:
        for part in text.split(","):
            if part.strip():
                name, limit = parse_budget(part)
                found[name] = limit
    return found


def violations(report: BenchReport, budgets: Mapping[str, float]) -> list[Violation]:
    """Every row whose ratio exceeds its budget, in report order."""
    from .table import seconds

    found = []
    for result in report.results:
        for row in result.rows:
            for ratio, limit in budgets.items():
                value = row.ratios.get(ratio)
                if value is None or value <= limit:
                    continue
                _, top, bottom = RATIOS[ratio]
                a, b = row.figures.get(top), row.figures.get(bottom)
                detail = (
                    f"{top} {seconds(a.median)}, {bottom} {seconds(b.median)}; median of the "
                    "per-round ratios"
                    if a is not None and b is not None
                    else "median of the per-round ratios"
                )
                found.append(
                    Violation(
                        result.op,
                        result.device,
                        row.section,
                        row.label,
                        ratio,
                        value,
                        limit,
                        detail,
                    )
                )
    return found


__all__ = ["Violation", "parse_budget", "parse_budgets", "violations"]
