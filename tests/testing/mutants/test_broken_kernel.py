"""A broken Triton kernel under ``check_op`` (issue 37): the kernel check fails at once, and
the checks that run the op through the kernel are skipped ("fix the kernel first") instead of
failing after it. Through a wrong kernel, gradcheck's fast mode fails and gradcheck then
recomputes the whole Jacobian in slow mode for its message: about two launches per input
element through Triton's interpreter (minutes on a user's sample), and a message that printed
both Jacobians."""

from __future__ import annotations

import pytest

from opreg_testing import ALL_CHECKS, OpNamespace, check_op

#: How gradcheck prints its Jacobians (none of it may reach a message).
_JACOBIAN_DUMP = ("numerical:", "Numerical:", "analytical:", "Analytical:", "tensor(", "[[")


@pytest.mark.needs_triton
def test_an_off_by_one_mask_fails_the_kernel_check_and_skips_the_checks_through_it(
    opreg_namespace: OpNamespace,
) -> None:
    from opreg_mutation_corpus import triton_ops  # imports Triton: only where it runs

    op = triton_ops.MUTANT_BUILDERS["triton_mask_off_by_one"](opreg_namespace)
    order: list[str] = []
    report = check_op(
        op,
        device="triton-cpu",
        options={"compile": {"backend": "aot_eager"}},
        progress=lambda result: order.append(result.check),
    )
    assert order[0] == "kernel" and sorted(order) == sorted(ALL_CHECKS)
    assert report.by_status("failed") == ["kernel"]
    assert report.by_status("passed") == ["fake"]  # the fake never reads the kernel's values
    reason = (
        "the kernel check failed on triton-cpu, and this check runs the op through its Triton "
        "kernel: fix the kernel first"
    )
    through_kernel = [name for name in ALL_CHECKS if name not in ("kernel", "fake")]
    assert report.by_status("skipped") == through_kernel
    for name in through_kernel:
        assert report[name].reason == reason, name
    kernel = report["kernel"].failure
    assert kernel is not None and kernel.mismatch is not None
    assert kernel.sample is not None and kernel.sample.startswith("'32x32'")
    assert kernel.mismatch.index == (0, 31)  # the first row's last column: never written
    assert kernel.mismatch.actual == 0 and kernel.mismatch.count == 32  # one per row
    texts = [str(r.failure) for r in report.results if r.failure is not None]
    texts += [r.reason for r in report.results] + [report.summary()]
    assert not [part for text in texts for part in _JACOBIAN_DUMP if part in text]
