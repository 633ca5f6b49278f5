"""torch's deprecation warnings about itself, raised inside a check, do not fail a downstream
suite that turns deprecation warnings into errors (issue 10, finding 7).

On torch 2.13 the first Inductor compilation imports ``torch.utils.mkldnn``, whose
``@torch.jit.script_method`` raises ``DeprecationWarning``; under ``-W error`` that made the
compile check fail with ``BackendCompilerFailed``. It must run in a fresh process: Inductor
warns only when it is first imported.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

TESTS = """
import warnings

import pytest
import torch
from torch import Tensor

from opreg_core import SampleInput, register_vmap_op
from opreg_testing import check_compile


def samples(device):
    yield SampleInput((torch.randn(3, device=device),), name="3")


def double(x: Tensor) -> Tensor:
    return 2 * x


def test_compile_check_under_error_filters(opreg_namespace):
    op = register_vmap_op(
        double, name=opreg_namespace.qualname("double"), fake_fn=torch.empty_like,
        sample_inputs=samples,
    )
    assert check_compile(op, backend="inductor", vmap=False).passed


def test_the_filter_is_only_inside_the_checks():
    with pytest.raises(DeprecationWarning, match="script_method"):
        warnings.warn_explicit(
            "`torch.jit.script_method` is deprecated", DeprecationWarning, "_script.py", 1,
            module="torch.jit._script",
        )
"""


def test_torch_deprecations_inside_a_check_do_not_fail_a_strict_suite(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_strict=TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-W", "error::DeprecationWarning"
    )
    result.assert_outcomes(passed=2)
