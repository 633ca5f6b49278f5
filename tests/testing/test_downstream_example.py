"""The README's complete downstream example (examples/downstream) passes its own test suite,
run as a separate project exactly as a downstream user would run it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "downstream"


def test_downstream_example_passes(pytester: pytest.Pytester) -> None:
    shutil.copytree(
        EXAMPLE, pytester.path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__")
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--opreg-device=cpu", "-rs")
    # 2 ops x 6 checks, + 2 plain tests; skipped: both kernel checks (no kernels), autograd of
    # the non-differentiable nearest_index.
    result.assert_outcomes(passed=11, skipped=3)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED * downstream_ops::nearest_index on cpu: autograd: the op is declared "
            "non-differentiable (differentiable=False)",
        ],
        consecutive=False,
    )
