"""Fixtures shared by the opreg-testing tests: registering throwaway ops in a fresh namespace."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from opreg_core import VmapOp, register_vmap_op
from opreg_testing import OpNamespace

Register = Callable[..., VmapOp[Any, Any]]


@pytest.fixture
def register(opreg_namespace: OpNamespace) -> Register:
    """``register(fn, **options)``: ``register_vmap_op`` into the test's own namespace."""

    def register(fn: Callable[..., Any], **options: Any) -> VmapOp[Any, Any]:
        options.setdefault("name", opreg_namespace.qualname(fn.__name__))
        return register_vmap_op(fn, **options)

    return register
