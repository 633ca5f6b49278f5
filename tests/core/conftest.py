"""Fixtures for opreg-core's own tests: a fresh op namespace per test, torn down afterwards."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
import torch

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
