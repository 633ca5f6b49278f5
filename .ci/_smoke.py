"""What the smoke scripts of ``.ci/run`` share: comparing results and reporting problems."""

from __future__ import annotations

import sys

import torch

Cases = dict[str, tuple[torch.Tensor, torch.Tensor]]


def compare(cases: Cases, problem: str, atol: float = 1e-8) -> list[str]:
    """Print one ``ok``/``BAD`` line per case (got, expected); return the problems."""
    problems = []
    for label, (got, expected) in cases.items():
        ok = got.shape == expected.shape and torch.allclose(got, expected, atol=atol)
        print(f"  {'ok ' if ok else 'BAD'} {label}")
        if not ok:
            problems.append(f"{label}: {problem}")
    return problems


def finish(script: str, problems: list[str], summary: str) -> int:
    """Print the problems and the verdict; the exit status (1 if any problem)."""
    for problem in problems:
        print(f"{script}: {problem}", file=sys.stderr)
    print(f"{summary}: ", end="")
    print("FAILED" if problems else "all good")
    return 1 if problems else 0
