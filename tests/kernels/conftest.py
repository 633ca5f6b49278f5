"""Fixtures for opreg-kernels' tests.

Triton kernels run either on CUDA or, without a GPU, on CPU tensors under
Triton's interpreter. ``TRITON_INTERPRET`` is read when a ``@triton.jit`` kernel
is defined, i.e. when opreg_kernels.jit.* is first imported (on the first
launch), so setting it here, before any test runs a kernel, is early enough.
On a machine with CUDA the interpreter stays off unless the caller sets it.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import opreg_kernels
from opreg_kernels import backend
from opreg_testing import OpNamespace

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
TRITON_INSTALLED = importlib.util.find_spec("triton") is not None
SHIPPED_OPS = (opreg_kernels.fused_add, opreg_kernels.philox_uniform, opreg_kernels.philox_normal)


@pytest.fixture
def ns(opreg_namespace: OpNamespace) -> str:
    """A fresh op namespace (the opreg-testing plugin's, torn down after the test), as text."""
    return opreg_namespace.name


@pytest.fixture
def requires_triton() -> None:
    """Skip the test where Triton is not installed (the no-Triton test environment)."""
    if not TRITON_INSTALLED:
        pytest.skip("Triton is not installed")


@pytest.fixture
def triton_state(monkeypatch: pytest.MonkeyPatch) -> Callable[[bool], None]:
    """Force ``has_triton()``'s answer for ops whose kernels first run in this test."""

    def force(available: bool) -> None:
        monkeypatch.setattr(backend, "_available", available)

    return force


@pytest.fixture(params=["cpu", "cuda"])
def triton_device(request: pytest.FixtureRequest) -> Iterator[torch.device]:
    """A device on which the shipped ops run their Triton kernels.

    "cpu": the interpreter (TRITON_INTERPRET=1), with "cpu" added to each shipped
    op's Triton device types for the test. "cuda": compiled kernels on a GPU.
    """
    if not TRITON_INSTALLED:
        pytest.skip("Triton is not installed")
    if not opreg_kernels.has_triton():
        pytest.skip("Triton is disabled or broken in this environment")
    if request.param == "cpu":
        if not INTERPRET:
            pytest.skip("the CPU runs of Triton kernels need TRITON_INTERPRET=1")
        infos = [opreg_kernels.triton_kernel_info(op) for op in SHIPPED_OPS]
        for info in infos:
            assert info.add_device_type("cpu")
        try:
            yield torch.device("cpu")
        finally:
            for info in infos:
                info.remove_device_type("cpu")
    else:
        if INTERPRET or not torch.cuda.is_available():
            pytest.skip("needs a CUDA device with compiled (not interpreted) Triton kernels")
        yield torch.device("cuda")


class LaunchSpy:
    """Counts calls of a module-level function (to prove that a Triton launcher ran)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> None:
        self.calls = 0
        original = getattr(module, name)

        def spy(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, spy)


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch, requires_triton: None) -> dict[str, LaunchSpy]:
    """Spies on the launch helpers of the shipped Triton kernels (imports Triton)."""
    from opreg_kernels.jit import add as jit_add
    from opreg_kernels.jit import philox as jit_philox

    return {
        "add": LaunchSpy(monkeypatch, jit_add, "launch_add"),
        "philox": LaunchSpy(monkeypatch, jit_philox, "launch_rows"),
    }


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
