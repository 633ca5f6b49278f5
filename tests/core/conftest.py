"""Fixtures for opreg-core's own tests: a fresh op namespace per test, torn down afterwards."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest
import torch
from hypothesis import settings

from opreg_core import registered_ops, unregister

_counter = itertools.count()


@pytest.fixture
def ns() -> Iterator[str]:
    """A unique namespace; every opreg op registered in it is unregistered after the test."""
    name = f"opreg_core_test_{next(_counter)}"
    yield name
    for op in registered_ops():
        if op.namespace == name:
            unregister(op.qualname)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


# Property-based tests: a fixed, derandomized profile in CI; `OPREG_HYPOTHESIS_PROFILE=long`
# explores far more examples when run by hand.
settings.register_profile("ci", max_examples=40, derandomize=True, deadline=None)
settings.register_profile("long", max_examples=1500, deadline=None)
settings.load_profile(os.environ.get("OPREG_HYPOTHESIS_PROFILE", "ci"))
