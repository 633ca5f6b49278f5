"""The error ``bench_op`` raises for bad input, in one line: ``opreg: <op>: <problem>``."""

from __future__ import annotations


class BenchError(ValueError):
    """An op that cannot be benchmarked as asked: no samples, a device without its kernel, a
    size ladder that does not fit from its first size. The message is one line."""

    def __init__(self, op: str, problem: str) -> None:
        self.op = op
        self.problem = problem
        super().__init__(f"opreg: {op}: {problem}")


__all__ = ["BenchError"]
