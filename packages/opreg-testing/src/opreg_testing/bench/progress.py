"""The live progress line of ``opreg bench``: what is being timed now (``[2/6]
opreg::fused_add [cuda] device 2^20 (1M): round 7/15``), redrawn in place on a terminal; off
a terminal, one line per op and device when it is done. Imports no torch."""

from __future__ import annotations

import time
from typing import Any, TextIO


class BenchProgress:
    """Call the instance with a status line while an op is measured, :meth:`done` with each
    op and device's result, and :meth:`close` at the end."""

    def __init__(self, total: int, stream: TextIO | None) -> None:
        self.total = total
        self.stream = stream
        self.live = stream is not None and stream.isatty()
        self.number = 0
        self._began = time.perf_counter()
        self._drawn = 0.0

    def __call__(self, text: str) -> None:
        if self.stream is None or not self.live:
            return
        now = time.perf_counter()
        if now - self._drawn < 0.05:  # at most 20 redraws a second
            return
        self._drawn = now
        line = f"[{self.number + 1}/{self.total}] {text}"
        print(f"\r\x1b[K{line}", end="", file=self.stream, flush=True)

    def done(self, result: Any) -> None:
        if self.stream is None:
            self.number += 1
            return
        self.number += 1
        erase = "\r\x1b[K" if self.live else ""
        elapsed = time.perf_counter() - self._began
        self._began = time.perf_counter()
        what = "not benchmarked" if result.skipped else f"{len(result.rows)} rows"
        line = (
            f"[{self.number}/{self.total}] {result.op} [{result.device}]: {what} in {elapsed:.1f}s"
        )
        print(f"{erase}{line}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.stream is not None and self.live:
            print("\r\x1b[K", end="", file=self.stream, flush=True)


__all__ = ["BenchProgress"]
