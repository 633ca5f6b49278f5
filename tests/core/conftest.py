"""Fixtures for opreg-core's own tests, built on the opreg-testing plugin's."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from opreg_testing import OpNamespace


@pytest.fixture
def ns(opreg_namespace: OpNamespace) -> str:
    """A fresh op namespace (the opreg-testing plugin's, torn down after the test), as text:
    tests name their ops ``f"{ns}::name"``."""
    return opreg_namespace.name


@pytest.fixture(autouse=True)
def _seed(opreg_seed: int) -> int:
    """Every core test runs under the plugin's deterministic seed."""
    return opreg_seed


# Property-based tests: a fixed, derandomized profile in CI; `OPREG_HYPOTHESIS_PROFILE=long`
# explores far more examples when run by hand.
settings.register_profile("ci", max_examples=40, derandomize=True, deadline=None)
settings.register_profile("long", max_examples=1500, deadline=None)
settings.load_profile(os.environ.get("OPREG_HYPOTHESIS_PROFILE", "ci"))
