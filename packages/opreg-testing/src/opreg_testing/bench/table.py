"""The report as a terminal table: the header, then per op and device one block per section
(times as ``median ±spread``, the ratios, bandwidth and peak memory), then notes."""

from __future__ import annotations

from typing import Any

from .ladder import format_bytes
from .rows import RATIOS, SECTIONS, Figure, OpResult, Row

_TITLES = {
    "device": "device time",
    "host": "host time per call",
    "train": "forward + backward",
    "vmap": "vmap",
}


def seconds(value: float) -> str:
    """``12.3 us``: three significant digits in the unit that suits."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def _figure(figure: Figure | None) -> str:
    if figure is None:
        return "n/a"
    return f"{seconds(figure.median)} ±{100 * figure.spread:.0f}%"


def _grid(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for n, r in enumerate(rows):
        out.append(
            "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
        )
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def _block(result: OpResult, section: str, copy: float | None) -> list[str]:
    rows: list[Row] = result.section(section)
    if not rows:
        return []
    columns = SECTIONS[section]
    ratios = [name for name, (s, _, _) in RATIOS.items() if s == section]
    head = ["size" if section != "host" else "inputs", *columns, *ratios]
    extra = section == "device"
    if extra:
        head += ["bytes", "GB/s", "% copy"]
        cuda = any(r.peak_bytes for r in rows)
        if cuda:
            head += [f"peak {c}" for c in columns]
    table = [head]
    for row in rows:
        line = [row.label, *(_figure(row.figures.get(c)) for c in columns)]
        line += [f"{row.ratios[r]:.2f}" if r in row.ratios else "-" for r in ratios]
        if extra:
            gbps = row.gbps()
            line += [
                format_bytes(row.bytes),
                "-" if gbps is None else f"{gbps:.3g}",
                "-" if gbps is None or not copy else f"{100 * gbps / copy:.0f}%",
            ]
            if cuda:
                line += [format_bytes(row.peak_bytes.get(c)) for c in columns]
        table.append(line)
    lines = [f"  {_TITLES[section]}" + (f" ({rows[0].shapes})" if section == "host" else "")]
    lines += [f"    {text}" for text in _grid(table)]
    reasons: dict[str, str] = {}
    for row in rows:
        for column, why in row.missing.items():
            reasons.setdefault(column, why)
    lines += [f"    n/a {column}: {why}" for column, why in reasons.items()]
    return lines


def header_lines(h: dict[str, Any], copy_gbps: dict[str, float]) -> list[str]:
    if not h:
        return []
    versions = ", ".join(
        [f"python {h.get('python')}", f"torch {h.get('torch')}", f"triton {h.get('triton')}"]
        + [f"{k} {v}" for k, v in (h.get("opreg") or {}).items() if v]
    )
    lines = [
        f"machine: {h.get('machine')}",
        f"cpu: {h.get('cpu')}; load {h.get('load')}",
        f"versions: {versions}",
    ]
    lines += [f"gpu: {g}" for g in h.get("gpus", [])]
    lines += [f"device timing on {d}: {t}" for d, t in (h.get("timing") or {}).items()]
    lines.append(f"host timing: {h.get('host timing')}")
    lines.append(f"compiled: {h.get('compiled')}")
    lines += [f"copy bandwidth of {d}: {v:.3g} GB/s" for d, v in copy_gbps.items()]
    return lines


def render_result(result: OpResult, copy: float | None) -> str:
    lines = [f"{result.op} on {result.device}"]
    if result.skipped is not None:
        return f"{lines[0]}: not benchmarked: {result.skipped}"
    lines[0] += f": kernel = {result.kernel}"
    for section in SECTIONS:
        lines += _block(result, section, copy)
    if result.stopped:
        lines.append(f"  size ladder {result.stopped}")
    return "\n".join(lines)


def render(header: dict[str, Any], copy_gbps: dict[str, float], results: list[OpResult]) -> str:
    """The whole report (``BenchReport.table()``): header, then one block per op and device."""
    parts = ["\n".join(header_lines(header, copy_gbps))]
    parts += [render_result(r, copy_gbps.get(r.device)) for r in results]
    return "\n\n".join(p for p in parts if p)


__all__ = ["header_lines", "render", "render_result", "seconds"]
