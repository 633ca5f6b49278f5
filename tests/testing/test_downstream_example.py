"""The README's complete downstream example (examples/downstream) passes its own test suite,
run as a separate project exactly as a downstream user would run it: on the default devices,
where ``soft_clamp``'s Triton kernel runs on triton-cpu (Triton's interpreter). A wrong kernel
is caught there (so the kernel itself ran), and a Triton that cannot run is not green."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "downstream"
FAST = ("-p", "no:cacheprovider", "-rs", "--opreg-compile-backend=aot_eager")


@pytest.fixture
def example(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A copy of the example project; the plugin decides about the interpreter itself."""
    import torch

    if torch.cuda.is_available():  # the tests below expect the CPU devices cpu, triton-cpu
        pytest.skip("with CUDA the default devices are cpu and cuda")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    shutil.copytree(
        EXAMPLE, pytester.path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__")
    )
    return pytester


@pytest.mark.needs_triton
def test_downstream_example_passes_on_the_default_devices(example: pytest.Pytester) -> None:
    result = example.runpytest_subprocess(*FAST)
    # test_op: 3 ops x 8 checks x (cpu, triton-cpu), + 3 plain tests x 2 devices. Skipped on cpu:
    # the 3 kernel checks (no CPU kernel), the 3 autocast checks (no autocast rule) and
    # autograd of the non-differentiable nearest_index; on triton-cpu the 2 pure-PyTorch ops
    # (16 tests: checked on cpu) and soft_clamp's autocast check.
    result.assert_outcomes(passed=30, skipped=24)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "opreg: devices cpu, triton-cpu; Triton interpreter on",
            "SKIPPED * downstream_ops::nearest_index on cpu: autograd: the op is declared "
            "non-differentiable (differentiable=False)",
            "SKIPPED * downstream_ops::pairwise_sqdist on triton-cpu: the op has no Triton "
            "kernel, so triton-cpu runs what cpu runs: it is checked on cpu",
        ],
        consecutive=False,
    )
    result.stdout.no_fnmatch_line("*Triton kernels not run*")


@pytest.mark.needs_triton
def test_a_wrong_kernel_is_caught_on_triton_cpu(example: pytest.Pytester) -> None:
    kernels = example.path / "src" / "downstream_ops" / "triton_kernels.py"
    source = kernels.read_text()
    assert "y = x / (1.0 + tl.abs(x) / limit)" in source
    kernels.write_text(source.replace("y = x / (1.0 + tl.abs(x) / limit)", "y = x / 1.0"))
    result = example.runpytest_subprocess(*FAST, "-k", "soft_clamp and kernel")
    result.assert_outcomes(failed=1, skipped=1)  # triton-cpu fails; cpu has no kernel
    result.stdout.fnmatch_lines(
        [
            "opreg kernel check failed for downstream_ops::soft_clamp",
            "  case:   kernel for 'cpu' vs fallback",
            "  problem: the kernel differs from the fallback: *",
        ],
        consecutive=False,
    )


@pytest.mark.needs_triton
def test_a_triton_that_fails_to_import_is_not_green(
    example: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """numpy missing (as the README's install once left it): Triton's interpreter cannot
    import, so soft_clamp's kernel runs nowhere: exit 1 naming the op, kernel and reason."""
    blocker = example.path / "no_numpy"
    blocker.mkdir()
    (blocker / "numpy.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'numpy'\", name='numpy')\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(blocker), prepend=os.pathsep)
    result = example.runpytest_subprocess(*FAST, "-k", "soft_clamp and fake")
    accepted = example.runpytest_subprocess(
        *FAST, "-k", "soft_clamp and fake", "-o", "opreg_unchecked=skip"
    )
    result.assert_outcomes(passed=1)  # on cpu: the fallback passes; triton-cpu is not a device
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "opreg: devices cpu; Triton interpreter on",
            "*= opreg: Triton kernels not run (a failure: the run exits 1; opreg_unchecked = "
            "skip accepts it) =*",
            "downstream_ops::soft_clamp: its Triton kernel (downstream_ops.triton_kernels:launch) "
            "ran on no device in this run, so only its PyTorch fallback was checked: Triton is "
            "installed but fails to import (ModuleNotFoundError: No module named 'numpy'); "
            "install numpy (pip install 'opreg-kernels[triton]' brings what Triton's "
            "interpreter needs)",
        ],
        consecutive=False,
    )
    accepted.assert_outcomes(passed=1)
    assert accepted.ret == 0
    accepted.stdout.fnmatch_lines(
        ["*= opreg: Triton kernels not run (accepted by opreg_unchecked = skip) =*"]
    )
