"""Each check on a correct op passes, and on a deliberately broken op fails with a message
that names the op, the check, the sample, the case and the first mismatch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import Tensor

from opreg_testing import (
    CheckFailure,
    NoSamplesError,
    SampleInput,
    Tolerance,
    check_autograd,
    check_compile,
    check_fake,
    check_kernel,
    check_opcheck,
    check_vmap,
)

Register = Callable[..., Any]  # the ``register`` fixture (conftest.py)


def matrix_samples(device: torch.device) -> Iterator[SampleInput]:
    """Two non-square samples, so that a wrong batch dim changes the shape."""
    g = torch.Generator().manual_seed(0)
    yield SampleInput((torch.randn(3, 4, generator=g).to(device), 2.5), name="3x4")
    yield SampleInput((torch.randn(2, 5, generator=g).to(device), -1.0), name="2x5")


def scale(x: Tensor, s: float) -> Tensor:
    return x * s


def _scale_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    ctx.s = inputs[1]


def _scale_backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
    return grad * ctx.s, None


def good_scale(register: Register) -> Any:
    return register(
        scale,
        fake_fn=lambda x, s: torch.empty_like(x),
        vmap_fn=lambda x, s: x * s,
        fake_vmap_fn=lambda x, s: torch.empty_like(x),
        backward=_scale_backward,
        setup_context=_scale_setup,
        sample_inputs=matrix_samples,
    )


def failure_of(check: Any, *args: Any, **kwargs: Any) -> CheckFailure:
    with pytest.raises(CheckFailure) as info:
        check(*args, **kwargs)
    return info.value


# -- a correct op passes everything -----------------------------------------------------------


def test_correct_op_passes_fake_vmap_autograd_opcheck(register: Register) -> None:
    op = good_scale(register)
    fake = check_fake(op)
    assert fake.passed and fake.info == {"dynamic": True, "fake_vmap_fn": "checked"}
    vmap = check_vmap(op)
    assert vmap.passed and vmap.info["batching"] == "vmap_fn"
    assert vmap.info["cases"] >= 10  # 0, -1, middle dim, nested 2 and 3 levels, per sample
    autograd = check_autograd(op).info
    assert autograd["samples"] == 2 and autograd["functorch"] and autograd["gradgrad"]
    assert check_opcheck(op).info["requires_grad_samples"] is True


def test_correct_op_passes_compile(register: Register) -> None:
    result = check_compile(good_scale(register), backend="aot_eager")
    assert result.passed and result.info == {
        "backend": "aot_eager",
        "dynamic": False,
        "vmap_cases": 2,
    }


def test_vmap_reports_opregs_loop_without_vmap_fn(register: Register) -> None:
    op = register(scale, fake_fn=lambda x, s: torch.empty_like(x), sample_inputs=matrix_samples)
    assert check_vmap(op).info["batching"] == "opreg per-sample loop"


def test_vmap_reports_the_loop_past_max_vmap_level(register: Register) -> None:
    op = register(
        scale,
        fake_fn=lambda x, s: torch.empty_like(x),
        vmap_fn=lambda x, s: x * s,
        fake_vmap_fn=lambda x, s: torch.empty_like(x),
        max_vmap_level=1,
        sample_inputs=matrix_samples,
    )
    paths = check_vmap(op).info["paths"]
    assert set(paths) == {"vmap_fn", "vmap_fn + per-sample loop"}


# -- fake -------------------------------------------------------------------------------------


def test_fake_with_wrong_shape_fails_naming_op_sample_and_shapes(register: Register) -> None:
    op = register(scale, fake_fn=lambda x, s: x.new_empty(x.shape[0]), sample_inputs=matrix_samples)
    failure = failure_of(check_fake, op)
    assert (failure.op, failure.check, failure.case) == (op.qualname, "fake", "static shapes")
    assert failure.mismatch is not None and failure.mismatch.kind == "shape"
    assert str(failure) == (
        f"opreg fake check failed for {op.qualname}\n"
        "  sample: '3x4' (x: Tensor[3, 4] float32, s: 2.5)\n"
        "  case:   static shapes\n"
        "  problem: the fake implementation of the op disagrees with the real output: "
        "output: shape (3,), expected (3, 4)"
    )


def test_fake_with_wrong_strides_fails(register: Register) -> None:
    op = register(
        scale,
        fake_fn=lambda x, s: x.new_empty(x.shape[1], x.shape[0]).t(),
        sample_inputs=matrix_samples,
    )
    failure = failure_of(check_fake, op)
    assert failure.mismatch is not None and failure.mismatch.kind == "strides"
    assert "strides (1, 3), expected (4, 1)" in str(failure)


def test_fake_that_reads_data_fails_with_the_error(register: Register) -> None:
    op = register(
        scale, fake_fn=lambda x, s: x.new_empty(int(x.sum() > 0) + 3), sample_inputs=matrix_samples
    )
    failure = failure_of(check_fake, op)
    assert "the op under FakeTensorMode raised" in failure.problem


def test_wrong_fake_vmap_fn_is_caught(register: Register) -> None:
    op = register(
        scale,
        fake_fn=lambda x, s: torch.empty_like(x),
        vmap_fn=lambda x, s: x * s,
        fake_vmap_fn=lambda x, s: torch.empty_like(x[0]),
        sample_inputs=matrix_samples,
    )
    failure = failure_of(check_fake, op)
    assert failure.case == "vmap in_dims=(0, None), batch size 3, static shapes"
    assert "fake implementation of vmap(op)" in failure.problem
    assert "shape (3, 4), expected (3, 3, 4)" in str(failure)


# -- vmap -------------------------------------------------------------------------------------


def test_vmap_rule_with_wrong_out_dims_fails(register: Register) -> None:
    # The rule returns the batch at the last dim but declares vmap_out_dims=0.
    op = register(
        scale,
        fake_fn=lambda x, s: torch.empty_like(x),
        vmap_fn=lambda x, s: (x * s).movedim(0, -1),
        fake_vmap_fn=lambda x, s: torch.empty_like(x).movedim(0, -1),
        sample_inputs=lambda d: [SampleInput((torch.randn(3, 3, device=d), 2.0), name="square")],
    )
    failure = failure_of(check_vmap, op)
    assert failure.case == "vmap in_dims=(0, None), batch size 3"
    assert failure.mismatch is not None and failure.mismatch.kind == "value"
    message = str(failure)
    assert (
        "vmap(op) differs from the op stacked over the batch: output at index (0, 0, 1)" in message
    )
    assert "tolerance rtol=1.3e-06, atol=1e-05" in message


def test_vmap_rule_that_mixes_up_arguments_fails_on_mixed_in_dims(register: Register) -> None:
    def add(x: Tensor, y: Tensor) -> Tensor:
        return x + y

    op = register(
        add,
        fake_fn=lambda x, y: torch.empty_like(x),
        vmap_fn=lambda x, y: x + y[:1],  # ignores the batch of y
        fake_vmap_fn=lambda x, y: torch.empty_like(x),
        sample_inputs=lambda d: [
            SampleInput((torch.randn(2, 3, device=d), torch.randn(2, 3, device=d)))
        ],
    )
    failure = failure_of(check_vmap, op)
    assert failure.sample is not None and failure.sample.startswith("'#0' (x: Tensor[2, 3] float32")
    assert "vmap in_dims=(0, 0)" in str(failure.case)


def test_vmap_without_tensor_arguments_is_skipped(register: Register) -> None:
    def ones(n: int) -> Tensor:
        return torch.ones(n)

    op = register(
        ones, fake_fn=lambda n: torch.empty(n), sample_inputs=lambda d: [SampleInput((3,))]
    )
    result = check_vmap(op)
    assert result.skipped and "no sample has a tensor argument" in result.reason


# -- compile ----------------------------------------------------------------------------------


def test_compile_fails_when_the_fake_lies(register: Register) -> None:
    op = register(scale, fake_fn=lambda x, s: x.new_empty(x.shape[0]), sample_inputs=matrix_samples)
    failure = failure_of(check_compile, op, backend="aot_eager")
    # Eager kernels run inside the graph, so only a graph that uses the wrong shape fails:
    # here vmap(op), whose batching rule re-wraps outputs by the fake's shape.
    assert failure.check == "compile" and failure.case is not None
    assert failure.case.endswith("backend=aot_eager") and "raised" in failure.problem


def test_compile_rejects_unknown_backend(register: Register) -> None:
    with pytest.raises(ValueError, match=r"unknown torch\.compile backend 'nope'"):
        check_compile(good_scale(register), backend="nope")


# -- autograd ---------------------------------------------------------------------------------


def test_wrong_backward_fails_with_the_first_jacobian_mismatch(register: Register) -> None:
    op = register(
        scale,
        fake_fn=lambda x, s: torch.empty_like(x),
        backward=lambda ctx, grad: (grad * 2 * ctx.s, None),
        setup_context=_scale_setup,
        sample_inputs=matrix_samples,
    )
    failure = failure_of(check_autograd, op)
    assert failure.case == "gradcheck, float64"
    mismatch = failure.mismatch
    assert mismatch is not None and mismatch.index == (0, 0)
    assert (mismatch.expected, mismatch.actual) == pytest.approx((2.5, 5.0))
    assert "Jacobian d(outputs)/d(x)" in str(failure)


def test_autograd_is_skipped_without_backward_or_when_non_differentiable(
    register: Register,
) -> None:
    plain = register(scale, fake_fn=lambda x, s: torch.empty_like(x), sample_inputs=matrix_samples)
    assert check_autograd(plain).reason == "the op has no backward"

    def scale2(x: Tensor, s: float) -> Tensor:
        return x * s

    frozen = register(
        scale2,
        fake_fn=lambda x, s: torch.empty_like(x),
        differentiable=False,
        sample_inputs=matrix_samples,
    )
    assert "non-differentiable" in check_autograd(frozen).reason


def test_vmap_of_grad_uses_the_backward(register: Register) -> None:
    # Right under gradcheck's finite differences only for s == 1; the functorch part
    # compares against per-sample torch.func.grad, which uses the same backward, so
    # check with a sample where the backward is right and the batched rule is wrong.
    op = register(
        scale,
        fake_fn=lambda x, s: torch.empty_like(x),
        vmap_fn=lambda x, s: x * s,
        fake_vmap_fn=lambda x, s: torch.empty_like(x),
        backward=_scale_backward,
        setup_context=_scale_setup,
        sample_inputs=matrix_samples,
    )
    assert check_autograd(op, functorch=True).passed


# -- kernel -----------------------------------------------------------------------------------


def test_kernel_that_differs_from_the_fallback_fails(register: Register) -> None:
    op = good_scale(register)
    op.register_kernel("cpu", lambda x, s: x * s + (x > 1).to(x.dtype) * 1e-3)
    failure = failure_of(check_kernel, op, device="cpu")
    assert failure.case == "kernel for 'cpu' vs fallback"
    assert "the kernel differs from the fallback: output at index" in str(failure)


def test_kernel_matching_the_fallback_passes_and_is_skipped_elsewhere(register: Register) -> None:
    op = good_scale(register)
    assert check_kernel(op).reason == "no kernel registered for device type 'cpu' (kernels: none)"
    handle = op.register_kernel("cpu", lambda x, s: torch.mul(x, s))
    result = check_kernel(op)
    assert result.passed and result.info["samples"] == 2 and result.info["batched_samples"] == 2
    handle.remove()
    assert check_kernel(op).skipped


def test_integer_kernels_are_compared_exactly_and_exact_applies_to_floats(
    register: Register,
) -> None:
    def bump(x: Tensor) -> Tensor:
        return x + 1

    op = register(
        bump,
        fake_fn=torch.empty_like,
        sample_inputs=lambda d: [SampleInput((torch.arange(6, device=d),))],
    )
    op.register_kernel("cpu", lambda x: x + 1 + (x == 5).to(x.dtype))
    assert failure_of(check_kernel, op).mismatch.tolerance.exact  # type: ignore[union-attr]

    close = good_scale(register)
    close.register_kernel("cpu", lambda x, s: (x * s) * (1 + 1e-7))
    assert check_kernel(close).passed
    assert "tolerance exact" in str(failure_of(check_kernel, close, exact=True))


def test_batched_kernel_is_compared_with_vmap_fn(register: Register) -> None:
    op = good_scale(register)
    op.register_kernel("cpu", lambda x, s: x * s)
    op.register_kernel("cpu", lambda x, s: x * s + 1, batched=True)
    failure = failure_of(check_kernel, op)
    assert failure.case == "batched operator vs vmap_fn, batch size 3"
    assert "the batched kernel differs from vmap_fn" in failure.problem


# -- opcheck ----------------------------------------------------------------------------------


def test_opcheck_failure_names_the_test_util(register: Register) -> None:
    op = register(
        scale,
        fake_fn=lambda x, s: x.new_empty(x.shape, dtype=torch.float64),
        sample_inputs=matrix_samples,
    )
    failure = failure_of(check_opcheck, op, test_utils=["test_schema", "test_faketensor"])
    assert failure.case == "torch.library.opcheck, test_faketensor"
    assert failure.problem.startswith("test_faketensor failed: ")
    assert "Dtypes torch.float32 and torch.float64 are not equal" in failure.problem


def test_opcheck_rejects_unknown_util(register: Register) -> None:
    with pytest.raises(ValueError, match="unknown opcheck test util"):
        check_opcheck(good_scale(register), test_utils="test_everything")


# -- other operators and bad input ----------------------------------------------------------


def test_plain_torch_ops_and_custom_ops_are_accepted() -> None:
    sample = [SampleInput((torch.randn(3, 4),))]
    result = check_vmap(torch.ops.aten.sin.default, sample)
    assert result.info["batching"] == "batching rule"
    assert check_fake(torch.ops.aten.sin.default, sample).passed
    with pytest.raises(TypeError, match="aten::sin has several overloads"):
        check_fake(torch.ops.aten.sin, sample)

    @torch.library.custom_op("opreg_testing_tests::twice", mutates_args=())
    def twice(x: Tensor) -> Tensor:
        return 2 * x

    twice.register_fake(lambda x: torch.empty_like(x))
    assert check_opcheck(twice, sample).passed
    assert check_vmap(twice, sample).info["batching"] == "PyTorch per-sample fallback"


def test_bad_input_raises_clear_errors(register: Register) -> None:
    op = good_scale(register)
    with pytest.raises(TypeError, match="expected an opreg op"):
        check_fake(lambda x: x)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="samples must be an iterable of SampleInput"):
        check_fake(op, 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sample 1 must be a SampleInput or a tuple"):
        check_fake(op, [SampleInput((torch.ones(1), 1.0)), torch.ones(1)])  # type: ignore[list-item]
    with pytest.raises(NoSamplesError, match="the list of samples is empty"):
        check_fake(op, [])
    with pytest.raises(ValueError, match="invalid device 'gpu0'"):
        check_fake(op, device="gpu0")
    with pytest.raises(TypeError, match="tolerance must be a Tolerance"):
        check_vmap(op, tolerance=0.1)  # type: ignore[arg-type]
    bare = register(scale, name=op.namespace + "::bare", fake_fn=lambda x, s: torch.empty_like(x))
    with pytest.raises(NoSamplesError, match="has no sample inputs"):
        check_fake(bare)


def test_tuples_are_samples_and_tolerance_is_used(register: Register) -> None:
    op = register(scale, fake_fn=lambda x, s: torch.empty_like(x))
    op.register_kernel("cpu", lambda x, s: x * s + 1e-3)
    assert check_kernel(op, [(torch.ones(2), 1.0)], tolerance=Tolerance(0, 1e-2)).passed
