"""Eating our own cooking: every check on every op opreg-kernels ships, through the plugin.

Runs once per ``--opreg-device`` (default: cpu, cuda when present, and triton-cpu where Triton
kernels can run on CPU, where the kernel check runs them through Triton's interpreter).
"""

from __future__ import annotations

from typing import Any

import pytest

from opreg_testing import ALL_CHECKS, check_kernel, parametrize_ops

pytest.importorskip("opreg_kernels")


@parametrize_ops("opreg_kernels")
@pytest.mark.parametrize("check", ALL_CHECKS)
def test_shipped_op(op: Any, check: str, opreg_device: Any, opreg_check: Any) -> None:
    opreg_check(op, check)


@pytest.mark.needs_triton
@parametrize_ops("opreg_kernels")
def test_shipped_triton_kernel_on_cpu(op: Any, opreg_triton_cpu: Any) -> None:
    """The Triton kernel itself (not the fallback) runs, through the interpreter, and agrees."""
    assert op.qualname in opreg_triton_cpu.ops
    # philox_uniform promises the same bits on every backend: compare it exactly.
    exact = op.qualname == "opreg::philox_uniform"
    result = check_kernel(op, device="cpu", exact=exact)
    assert result.passed and result.info["samples"] >= 3
    assert result.info["kernel"] == "triton"
