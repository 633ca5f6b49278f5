"""Fixtures for opreg-kernels' tests, on top of the opreg-testing pytest plugin.

The plugin (``opreg_triton_interpret = "auto"`` in the root pyproject.toml) turns Triton's
interpreter on before anything imports Triton when Triton is installed and no CUDA device is
present, so the Triton kernels run on CPU tensors here; it provides ``opreg_namespace``,
``opreg_triton_cpu``, ``opreg_seed`` and the ``needs_triton``/``needs_cuda`` markers. What
is left here is specific to opreg-kernels: forcing ``has_triton()``, the two devices its
kernels run on, and spies on the shipped launchers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from opreg_kernels import _availability
from opreg_testing import OpNamespace, interpreter_enabled


@pytest.fixture(autouse=True)
def _seed(opreg_seed: int) -> None:
    """Every test runs seeded (the plugin's per-test seed, RNG state restored afterwards)."""


@pytest.fixture
def ns(opreg_namespace: OpNamespace) -> str:
    """The plugin's fresh op namespace (torn down after the test), as text."""
    return opreg_namespace.name


@pytest.fixture
def triton_state(monkeypatch: pytest.MonkeyPatch) -> Callable[[bool], None]:
    """Force ``has_triton()``'s answer for ops whose kernels first run in this test."""

    def force(available: bool) -> None:
        monkeypatch.setattr(_availability, "_available", available)

    return force


@pytest.fixture(params=["cpu", "cuda"])
def triton_device(request: pytest.FixtureRequest) -> Iterator[torch.device]:
    """A device on which the shipped ops run their Triton kernels (use with ``needs_triton``).

    "cpu": Triton's interpreter, through the plugin's ``opreg_triton_cpu`` (every Triton op
    gets a CPU kernel for the test). "cuda": compiled kernels on a GPU.
    """
    if request.param == "cpu":
        request.getfixturevalue("opreg_triton_cpu")
        yield torch.device("cpu")
    else:
        if interpreter_enabled() or not torch.cuda.is_available():
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
def launches(monkeypatch: pytest.MonkeyPatch) -> dict[str, LaunchSpy]:
    """Spies on the launch helpers of the shipped Triton kernels (imports Triton)."""
    pytest.importorskip("triton")
    from opreg_kernels.ops.fused_add import triton_kernels as add_kernels
    from opreg_kernels.ops.philox import triton_kernels as philox_kernels

    return {
        "add": LaunchSpy(monkeypatch, add_kernels, "launch_add"),
        "philox": LaunchSpy(monkeypatch, philox_kernels, "launch_rows"),
    }
