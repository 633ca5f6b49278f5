"""What the contract tests of the three packages share (``tests/*/test_internals_contract.py``).

``Coverage.covers`` declares the ``INTERNALS`` entries a test exercises; ``Coverage.check``
asserts that every entry is covered by some test and that no test names an unknown one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class Coverage:
    """internal -> the tests that cover it, filled by :meth:`covers` at import."""

    def __init__(self) -> None:
        self.covered: dict[str, list[str]] = {}

    def covers(self, *internals: str) -> Callable[[F], F]:
        """Declare the ``INTERNALS`` entries a test exercises."""

        def mark(test: F) -> F:
            for name in internals:
                self.covered.setdefault(name, []).append(test.__name__)
            return test

        return mark

    def check(self, internals: Iterable[str], module: str) -> None:
        """Every entry of ``module``'s ``internals`` covered; no unknown name declared."""
        listed = set(internals)
        uncovered = sorted(listed - set(self.covered))
        assert not uncovered, f"internals of {module} without a contract test: {uncovered}"
        unknown = sorted(set(self.covered) - listed)
        assert not unknown, f"contract tests name internals INTERNALS does not list: {unknown}"
