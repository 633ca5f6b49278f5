"""Plots of a report: one PNG per op, time against size (kernel, fallback, compiled) and
bandwidth against size (with the device's copy bandwidth), through matplotlib, the optional
extra ``opreg-testing[bench]``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .report import BenchReport
from .rows import SECTIONS

INSTALL = "pip install 'opreg-testing[bench]' (or pip install matplotlib)"


def _pyplot() -> Any:
    import importlib

    try:
        matplotlib = importlib.import_module("matplotlib")
    except ImportError:
        raise ImportError(f"opreg bench --plot needs matplotlib: {INSTALL}") from None
    matplotlib.use("Agg")  # files only, no display
    return importlib.import_module("matplotlib.pyplot")


def file_name(op: str) -> str:
    """``opreg::fused_add`` -> ``opreg-fused_add.png``."""
    return re.sub(r"[^\w.-]+", "-", op.replace("::", "-")) + ".png"


def plot(report: BenchReport, folder: str | Path) -> list[Path]:
    """Write one PNG per op into ``folder`` (created); the paths written."""
    plt = _pyplot()
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    ops = list(dict.fromkeys(r.op for r in report.results if r.section("device")))
    for op in ops:
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
        for result in (r for r in report.results if r.op == op):
            rows = result.section("device")
            for column, style in zip(SECTIONS["device"], ("o-", "s--", "^:"), strict=True):
                points = [(r.size, f.median * 1e3) for r in rows if (f := r.figures.get(column))]
                if points:
                    left.plot(
                        *zip(*points, strict=True), style, label=f"{column} [{result.device}]"
                    )
                    if rows[0].bytes is not None:
                        bw = [
                            (r.size, r.bytes / f.median / 1e9)
                            for r in rows
                            if (f := r.figures.get(column)) and r.bytes
                        ]
                        right.plot(
                            *zip(*bw, strict=True), style, label=f"{column} [{result.device}]"
                        )
            copy = report.copy_gbps.get(result.device)
            if copy:
                right.axhline(copy, color="grey", linewidth=0.8, label=f"copy [{result.device}]")
        left.set(
            xscale="log",
            yscale="log",
            xlabel="size (elements of the largest input)",
            ylabel="device time (ms)",
        )
        right.set(
            xscale="log",
            xlabel="size (elements of the largest input)",
            ylabel="GB/s (inputs read + outputs written)",
        )
        left.set_title(f"{op}: time (median)")
        right.set_title(f"{op}: bandwidth")
        for axes in (left, right):
            axes.grid(True, which="both", alpha=0.3)
            axes.legend(fontsize=8)
        fig.tight_layout()
        path = out / file_name(op)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


__all__ = ["INSTALL", "file_name", "plot"]
