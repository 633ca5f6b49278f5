"""Triton availability (_availability): has_triton, the device-type set, triton_supports_device."""

from __future__ import annotations

import importlib.util

import pytest
import torch

import opreg_kernels
from opreg_kernels import _availability


@pytest.fixture
def device_types(monkeypatch: pytest.MonkeyPatch) -> None:
    """Restore the global Triton device-type set after the test."""
    monkeypatch.setattr(_availability, "_device_types", _availability._device_types)


def test_default_device_types_are_cuda_only() -> None:
    assert opreg_kernels.triton_device_types() == frozenset({"cuda"})


def test_register_triton_device_type_normalises_and_ignores_empty(device_types: None) -> None:
    opreg_kernels.register_triton_device_type("  NPU ")
    opreg_kernels.register_triton_device_type("")
    opreg_kernels.register_triton_device_type("   ")
    opreg_kernels.register_triton_device_type("cuda")
    assert opreg_kernels.triton_device_types() == frozenset({"cuda", "npu"})
    with pytest.raises(TypeError, match=r"^opreg: register_triton_device_type expects a str"):
        opreg_kernels.register_triton_device_type(3)  # type: ignore[arg-type]


def test_unregister_triton_device_type_is_the_inverse(device_types: None) -> None:
    assert "unregister_triton_device_type" in opreg_kernels.__all__
    opreg_kernels.register_triton_device_type("npu")
    opreg_kernels.unregister_triton_device_type("  NPU ")
    assert opreg_kernels.triton_device_types() == frozenset({"cuda"})
    opreg_kernels.unregister_triton_device_type("never-registered")  # ignored
    opreg_kernels.unregister_triton_device_type("")
    assert opreg_kernels.triton_device_types() == frozenset({"cuda"})
    opreg_kernels.unregister_triton_device_type("CUDA")
    assert opreg_kernels.triton_device_types() == frozenset()
    assert not opreg_kernels.triton_supports_device("cuda:0")
    opreg_kernels.register_triton_device_type("cuda")
    with pytest.raises(TypeError, match=r"^opreg: unregister_triton_device_type expects a str"):
        opreg_kernels.unregister_triton_device_type(None)  # type: ignore[arg-type]


def test_has_triton_reflects_whether_triton_imports() -> None:
    installed = importlib.util.find_spec("triton") is not None
    disabled = _availability._disabled_by_env()
    assert opreg_kernels.has_triton() == (installed and not disabled)
    assert opreg_kernels.has_triton() is opreg_kernels.has_triton()  # cached


@pytest.mark.parametrize(
    ("device", "expected_type"),
    [
        ("cuda", "cuda"),
        ("cuda:1", "cuda"),
        (" CUDA:0 ", "cuda"),
        (torch.device("cuda", 3), "cuda"),
        ("cpu", None),
        (torch.device("cpu"), None),
        ("npu", None),
        ("npu:0", None),
        ("", None),
        ("not a device", None),
        (None, None),
        (0, None),
        (object(), None),
    ],
)
def test_triton_supports_device_never_raises(device: object, expected_type: str | None) -> None:
    expected = expected_type is not None and opreg_kernels.has_triton()
    assert opreg_kernels.triton_supports_device(device) is expected


def test_triton_supports_device_follows_registered_types(device_types: None) -> None:
    opreg_kernels.register_triton_device_type("npu")
    assert opreg_kernels.triton_supports_device("npu:1") is opreg_kernels.has_triton()
