"""What ``opreg bench`` measured, as data: the report (its figures, rows and results are
in :mod:`.rows`), with a JSON form that round-trips (``BenchReport.from_dict(r.to_dict()) == r``).

Imports no torch (``opreg bench --help`` and the JSON reader need none).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .rows import RATIOS, SECTIONS, Figure, OpResult, Row
from .table import render

#: Version of the JSON layout (``BenchReport.to_dict()["schema"]``).
SCHEMA = 1


@dataclass
class BenchReport:
    """The results of a benchmark run, with the header (machine, versions, clocks, how the
    timing was done) and the copy bandwidth of each device, in GB/s."""

    header: dict[str, Any] = field(default_factory=dict)
    copy_gbps: dict[str, float] = field(default_factory=dict)
    results: list[OpResult] = field(default_factory=list)

    def result(self, op: str, device: str | None = None) -> OpResult:
        """The result of ``op`` (its qualified name; on ``device`` when given)."""
        for found in self.results:
            if found.op == op and (device is None or found.device == device):
                return found
        raise KeyError(f"no result for {op}" + (f" on {device}" if device else ""))

    @property
    def rows(self) -> list[Row]:
        return [row for result in self.results for row in result.rows]

    def table(self) -> str:
        """The report as the terminal table ``opreg bench`` prints."""
        return render(self.header, self.copy_gbps, self.results)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "header": self.header,
            "copy_gbps": self.copy_gbps,
            "results": [result.to_dict() for result in self.results],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchReport:
        if data.get("schema") != SCHEMA:
            raise ValueError(
                f"not an opreg bench report of schema {SCHEMA}: {data.get('schema')!r}"
            )
        return cls(
            header=dict(data.get("header", {})),
            copy_gbps=dict(data.get("copy_gbps", {})),
            results=[OpResult.from_dict(r) for r in data.get("results", [])],
        )


__all__ = ["RATIOS", "SCHEMA", "SECTIONS", "BenchReport", "Figure", "OpResult", "Row"]
