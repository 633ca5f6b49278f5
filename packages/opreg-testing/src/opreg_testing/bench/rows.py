"""What ``opreg bench`` measures, as data: the sections and ratios, figures, rows and one
result per op and device, each with a JSON form (:mod:`.report` holds the whole report).

Imports no torch (``opreg bench --help`` and the JSON reader need none).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: The sections of a result, in table order, each with its columns (the functions a row
#: times): ``device`` (device time on the size ladder), ``host`` (host time per call on tiny
#: inputs), ``train`` (forward + backward), ``vmap`` (a batch of entries).
SECTIONS: dict[str, tuple[str, ...]] = {
    "device": ("kernel", "fallback", "compiled"),
    "host": ("op", "launcher", "library"),
    "train": ("op", "autograd"),
    "vmap": ("vmap(op)", "loop", "vmap(fallback)"),
}

#: Every ratio a row reports, by name: (section, numerator column, denominator column).
#: Budgets (``--max-ratio NAME=LIMIT``) name these.
RATIOS: dict[str, tuple[str, str, str]] = {
    "kernel/fallback": ("device", "kernel", "fallback"),
    "kernel/compiled": ("device", "kernel", "compiled"),
    "op/launcher": ("host", "op", "launcher"),
    "op/library": ("host", "op", "library"),
    "fwd+bwd/autograd": ("train", "op", "autograd"),
    "vmap/loop": ("vmap", "vmap(op)", "loop"),
    "vmap/fallback": ("vmap", "vmap(op)", "vmap(fallback)"),
}


@dataclass(frozen=True)
class Figure:
    """One timed function of a row: the median over rounds and the quartiles, in seconds
    (``q1``/``q3``: the spread), and how many rounds."""

    median: float
    q1: float
    q3: float
    rounds: int

    @property
    def spread(self) -> float:
        """Half the interquartile range, relative to the median (0.02: ±2 %)."""
        return (self.q3 - self.q1) / 2 / self.median if self.median > 0 else 0.0


@dataclass
class Row:
    """One row of a result: a section (``device``, ``host``, ``train``, ``vmap``) at one size.

    ``figures`` maps a column (``kernel``, ``fallback``, ``compiled``; ``op``, ``launcher``,
    ``library``; ...) to its :class:`Figure`, or to None where it does not apply, with the
    reason in ``missing``. ``ratios`` maps ``a/b`` to the median per-round ratio of the two.
    ``bytes``: inputs read plus outputs written by one call (None: not known);
    ``peak_bytes``: peak CUDA memory of one call per column (CUDA only).
    """

    section: str
    size: int
    label: str
    figures: dict[str, Figure | None] = field(default_factory=dict)
    ratios: dict[str, float] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    bytes: int | None = None
    peak_bytes: dict[str, int] = field(default_factory=dict)
    shapes: str = ""

    def gbps(self, column: str = "kernel") -> float | None:
        """Achieved bandwidth of ``column`` in GB/s (bytes moved / median time), or None."""
        figure = self.figures.get(column)
        if self.bytes is None or figure is None or figure.median <= 0:
            return None
        return self.bytes / figure.median / 1e9

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Row:
        figures = {
            k: None if v is None else Figure(**v) for k, v in data.get("figures", {}).items()
        }
        fields = {k: v for k, v in data.items() if k not in ("figures", "gbps")}
        return cls(**fields, figures=figures)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["gbps"] = self.gbps() if self.section == "device" else None
        return data


@dataclass
class OpResult:
    """One op on one device: what ``kernel`` means there, its rows, notes, and why it was not
    benchmarked (``skipped``) or where its size ladder stopped (``stopped``)."""

    op: str
    device: str
    kernel: str = ""
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None
    stopped: str | None = None

    def section(self, name: str) -> list[Row]:
        return [row for row in self.rows if row.section == name]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OpResult:
        rows = [Row.from_dict(r) for r in data.get("rows", [])]
        return cls(**{k: v for k, v in data.items() if k != "rows"}, rows=rows)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["rows"] = [row.to_dict() for row in self.rows]
        return data


__all__ = ["RATIOS", "SECTIONS", "Figure", "OpResult", "Row"]
