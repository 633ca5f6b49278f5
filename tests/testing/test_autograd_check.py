"""The autograd check: second derivatives (gradgradcheck, and a clear failure for a backward
that is not differentiable, with its opt-out; once-differentiable ops, whose double backward
raises a clear error, pass and are reported as such), list arguments, and the torch.func part's
cases (unbatched arguments, nested vmaps) and messages naming the likely cause."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from opreg_core import NotDifferentiableError
from opreg_testing import (
    CheckFailure,
    OpNamespace,
    SampleInput,
    check_autograd,
    check_op,
    triton_device,
)
from opreg_testing.checks._declined import TORCH_ONCE_DIFFERENTIABLE, declined
from opreg_testing.checks._harness import prepare
from opreg_testing.checks.autograd import VMAP_HINT, _compare_grads
from opreg_testing.table import render_details

Register = Callable[..., Any]  # the ``register`` fixture (conftest.py)


def samples(device: torch.device) -> Iterator[SampleInput]:
    g = torch.Generator().manual_seed(0)
    yield SampleInput((torch.randn(3, 4, generator=g).to(device),), name="3x4")


def double(x: Tensor) -> Tensor:
    return 2 * x


def save_x(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    ctx.save_for_backward(inputs[0])


def sin(x: Tensor) -> Tensor:
    return torch.sin(x)


def register_sin(register: Register, backward: Callable[..., Any], **options: Any) -> Any:
    return register(
        sin,
        fake_fn=torch.empty_like,
        vmap_fn=torch.sin,
        fake_vmap_fn=torch.empty_like,
        backward=backward,
        setup_context=save_x,
        sample_inputs=samples,
        **options,
    )


def failure_of(*args: Any, **kwargs: Any) -> CheckFailure:
    with pytest.raises(CheckFailure) as info:
        check_autograd(*args, **kwargs)
    return info.value


def test_a_right_backward_passes_second_order_too(register: Register) -> None:
    op = register_sin(register, lambda ctx, g: g * torch.cos(ctx.saved_tensors[0]))
    result = check_autograd(op)
    assert result.passed and result.info["gradgrad"] is True


def test_a_backward_under_no_grad_is_reported_as_not_differentiable(register: Register) -> None:
    def backward(ctx: Any, g: Tensor) -> Tensor:
        with torch.no_grad():
            return g * torch.cos(ctx.saved_tensors[0])

    op = register_sin(register, backward)
    failure = failure_of(op)
    assert failure.case == "gradgradcheck, float64"
    message = str(failure)
    assert f"opreg autograd check failed for {op.qualname}" in message
    assert "the backward is not differentiable: the gradient it returns for x" in message
    assert "check_autograd(op, gradgrad=False)" in message
    assert 'options={"autograd": {"gradgrad": False}}' in message
    # The opt-out, both ways: the first-order checks still run and pass.
    assert check_autograd(op, gradgrad=False).info["gradgrad"] is False
    report = check_op(op, checks=["autograd"], options={"autograd": {"gradgrad": False}})
    assert report["autograd"].passed


def test_a_wrong_second_derivative_names_the_first_jacobian_entry(register: Register) -> None:
    # The backward detaches x inside cos: first derivative right, second derivative missing.
    op = register_sin(register, lambda ctx, g: g * torch.cos(ctx.saved_tensors[0].detach()))
    failure = failure_of(op)
    assert failure.case == "gradgradcheck, float64"
    assert "the backward's own derivative (the second derivative) disagrees" in str(failure)
    mismatch = failure.mismatch
    assert mismatch is not None and "Jacobian d(gradients)/d(x)" in mismatch.where
    # d(grad x[0]) / d(x[0]) = -v[0] sin(x[0]) by finite differences; 0 through the detach.
    assert mismatch.index == (0, 0) and mismatch.actual == 0 and abs(mismatch.expected) > 1e-3


#: What gradcheck's own message prints its Jacobians with (issue 37: a message carried them).
_JACOBIAN_DUMP = ("numerical:", "Numerical:", "analytical:", "Analytical:", "tensor(", "[[")


def _large(device: torch.device) -> Iterator[SampleInput]:
    """80 elements: a Jacobian of 6400 entries, more than the check works out itself."""
    g = torch.Generator().manual_seed(1)
    yield SampleInput((torch.randn(8, 10, generator=g).to(device),), name="8x10")


def _assert_no_jacobian_dump(failure: CheckFailure) -> None:
    message = str(failure)
    assert not [part for part in _JACOBIAN_DUMP if part in message], message
    assert len(failure.problem.splitlines()) == 1, message


def test_a_large_jacobian_mismatch_names_entries_not_gradcheck_s_dump(register: Register) -> None:
    # Slow mode (fast_mode=False): gradcheck prints 6400-entry Jacobians, summarised with
    # "..."; the message names the entries that differ among them, placed by the sizes (the
    # last element's entry is (79, 79)), and leaves the dump out.
    def last_lost(ctx: Any, g: Tensor) -> Tensor:
        keep = torch.ones_like(g).flatten()
        keep[-1] = 0
        return 2 * g * keep.view_as(g)

    op = register(
        double, fake_fn=torch.empty_like, backward=last_lost, sample_inputs=_large
    )  # fmt: skip
    failure = failure_of(op, fast_mode=False)
    _assert_no_jacobian_dump(failure)
    assert failure.case == "gradcheck, float64"
    assert failure.problem == (
        "the backward disagrees with finite differences (gradcheck); expected = finite "
        "differences, actual = backward: Jacobian d(output 0)/d(x) [flat output index, flat "
        "input index] at (79, 79): expected 2, actual 0 (1 of the 36 entries gradcheck printed "
        "of 6400 differ)"
    )


def test_a_fast_mode_mismatch_names_entries_and_the_largest_difference(
    register: Register,
) -> None:
    # Fast mode (80 elements): gradcheck recomputes both Jacobians in slow mode for its
    # message; the first differing entries and its largest difference per element remain.
    op = register(
        double, fake_fn=torch.empty_like, backward=lambda ctx, g: 3 * g, sample_inputs=_large
    )  # fmt: skip
    failure = failure_of(op)
    _assert_no_jacobian_dump(failure)
    assert failure.case == "gradcheck, float64, fast mode"
    assert failure.problem.endswith(
        "Jacobian d(output 0)/d(x) [flat output index, flat input index] at (0, 0): expected "
        "2, actual 3; (1, 1): expected 2, actual 3; (2, 2): expected 2, actual 3 (6 of the 36 "
        "entries gradcheck printed of 6400 differ); largest difference per element 1"
    )


def test_a_constant_zero_gradient_is_not_called_non_differentiable(register: Register) -> None:
    def floor(x: Tensor) -> Tensor:
        return torch.floor(x)

    op = register(
        floor,
        fake_fn=torch.empty_like,
        backward=lambda ctx, g: torch.zeros_like(g),
        sample_inputs=samples,
    )
    assert check_autograd(op).passed


def test_a_linear_op_has_a_differentiable_backward(register: Register) -> None:
    # The gradient does not depend on x, but it does on the output gradient: not "detached".
    def triple(x: Tensor) -> Tensor:
        return 3 * x

    op = register(
        triple, fake_fn=torch.empty_like, backward=lambda ctx, g: 3 * g, sample_inputs=samples
    )
    assert check_autograd(op).passed


def list_samples(device: torch.device) -> Iterator[SampleInput]:
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(2, 3, generator=g).to(device) for _ in range(2)]
    yield SampleInput((xs,), name="two 2x3")


def product(xs: list[Tensor]) -> Tensor:
    return xs[0] * xs[1]


def save_list(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    ctx.save_for_backward(*inputs[0])


def test_list_arguments_are_differentiated_element_by_element(register: Register) -> None:
    def right(ctx: Any, g: Tensor) -> tuple[list[Tensor]]:
        a, b = ctx.saved_tensors
        return ([g * b, g * a],)

    good = register(
        product,
        fake_fn=lambda xs: torch.empty_like(xs[0]),
        vmap_fn=product,
        fake_vmap_fn=lambda xs: torch.empty_like(xs[0]),
        backward=right,
        setup_context=save_list,
        sample_inputs=list_samples,
    )
    result = check_autograd(good)
    assert result.passed and result.info["samples"] == 1

    def product2(xs: list[Tensor]) -> Tensor:
        return xs[0] * xs[1]

    bad = register(
        product2,
        fake_fn=lambda xs: torch.empty_like(xs[0]),
        backward=lambda ctx, g: ([g * ctx.saved_tensors[1], g],),  # wrong for xs[1]
        setup_context=save_list,
        sample_inputs=list_samples,
    )
    failure = failure_of(bad)
    assert failure.case == "gradcheck, float64"
    assert failure.mismatch is not None and "d(outputs)/d(xs[1])" in failure.mismatch.where


def broadcast_samples(device: torch.device) -> Iterator[SampleInput]:
    g = torch.Generator().manual_seed(2)
    a, x = torch.randn(4, generator=g), torch.randn(3, 4, generator=g)
    yield SampleInput((a.to(device), x.to(device)), name="a(4), x(3x4)")


def scaled_sin(a: Tensor, x: Tensor) -> Tensor:
    return torch.sin(a * x)


def test_unbatched_and_nested_cases_with_a_broadcast_shaped_gradient(register: Register) -> None:
    # Finding 2 of issue 10: a's gradient comes back in the output's shape (valid for autograd).
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor]:
        a, x = ctx.saved_tensors
        c = torch.cos(a * x)
        return g * x * c, g * a * c

    op = register(
        scaled_sin,
        fake_fn=lambda a, x: torch.empty_like(x),
        backward=backward,
        setup_context=lambda ctx, inputs, out: ctx.save_for_backward(*inputs),
        sample_inputs=broadcast_samples,
    )
    # in_dims (0, 0), (None, 0), (0, None), and two nested levels
    assert check_autograd(op).info["functorch_cases"] == 4
    assert check_autograd(op, nested=False).info["functorch_cases"] == 3


def test_a_backward_that_fails_only_under_torch_func_says_why(register: Register) -> None:
    def backward(ctx: Any, g: Tensor) -> Tensor:
        x = ctx.saved_tensors[0].detach()
        return g * torch.from_numpy(np.cos(x.numpy()))

    op = register_sin(register, backward)
    failure = failure_of(op, gradgrad=False)
    assert failure.case == "grad, float64"
    assert "torch.func.grad(op) per batch entry raised" in str(failure)
    assert "fails only under torch.func transforms" in str(failure)


def test_a_backward_that_fails_only_under_vmap_names_the_likely_causes(register: Register) -> None:
    def backward(ctx: Any, g: Tensor) -> Tensor:
        x = ctx.saved_tensors[0]
        return g * torch.cos(x) * (1.0 if x.sum().item() < 1e9 else 0.0)

    op = register_sin(register, backward)
    failure = failure_of(op, gradgrad=False)
    assert failure.case is not None and failure.case.startswith("vmap(grad(op)), vmap in_dims")
    assert VMAP_HINT in str(failure)


def test_a_gradient_summed_over_the_batch_is_named(register: Register) -> None:
    op = register_sin(register, lambda ctx, g: g * torch.cos(ctx.saved_tensors[0]))
    ctx = prepare("autograd", op, None, None)
    sample = ctx.samples[0]
    expected = (torch.arange(12.0).reshape(3, 4),)
    actual = (expected[0].sum(0, keepdim=True).expand(3, 4),)
    with pytest.raises(CheckFailure) as info:
        _compare_grads(ctx, expected, actual, sample, "grad(vmap(op)), case", "grad(vmap(op))", 1)
    message = str(info.value)
    assert "each batch entry got the sum of the per-sample gradients over the whole" in message
    other = (expected[0] * 2,)
    with pytest.raises(CheckFailure) as info:
        _compare_grads(ctx, expected, other, sample, "grad(vmap(op)), case", "grad(vmap(op))", 1)
    assert "sum of the per-sample gradients" not in str(info.value)
    assert VMAP_HINT in str(info.value)


def test_batch_entries_option_is_validated(register: Register) -> None:
    op = register_sin(register, lambda ctx, g: g * torch.cos(ctx.saved_tensors[0]))
    with pytest.raises(ValueError, match="batch_entries must be one of"):
        check_autograd(op, batch_entries="nope")
    assert check_autograd(op, batch_entries="permute").passed


# -- once differentiable: double backward declined with a clear error (issue 20, finding 4) ------


def cos(x: Tensor) -> Tensor:
    return torch.cos(x)


def test_a_backward_calling_an_op_without_backward_is_once_differentiable(
    register: Register,
) -> None:
    inner = register(
        cos, fake_fn=torch.empty_like, vmap_fn=torch.cos, fake_vmap_fn=torch.empty_like
    )
    op = register_sin(register, lambda ctx, g: g * inner(ctx.saved_tensors[0]))
    report = check_op(op, checks=["autograd"])
    result = report["autograd"]
    assert result.passed, result.reason
    assert result.info["once_differentiable"] is True and result.info["gradgrad"] is True
    refusal = f"opreg: {inner.qualname} was registered without a backward, so it cannot be"
    assert result.info["declined"]["double backward"].startswith(refusal)
    assert len(result.notes) == 1 and result.notes[0].startswith(
        f"once differentiable: double backward raises '{refusal}"
    )
    assert "(once differentiable: double backward raises" in report.summary()
    details = render_details([report])
    assert f"Notes:\n  {op.qualname} [cpu] autograd: once differentiable: double" in details
    data = json.loads(json.dumps(report.to_dict()))["results"][0]
    assert data["notes"] == result.notes and data["info"]["once_differentiable"] is True


def test_a_differentiable_backward_is_not_once_differentiable(register: Register) -> None:
    right = check_autograd(
        register_sin(register, lambda ctx, g: g * torch.cos(ctx.saved_tensors[0]))
    )
    assert right.info["once_differentiable"] is False and right.notes == []
    assert "declined" not in right.info or "double backward" not in right.info["declined"]


def test_torch_once_differentiable_is_once_differentiable(register: Register) -> None:
    @once_differentiable
    def backward(ctx: Any, g: Tensor) -> Tensor:
        return g * torch.cos(ctx.saved_tensors[0])

    result = check_autograd(register_sin(register, backward))
    assert result.info["once_differentiable"] is True
    assert result.info["declined"]["double backward"] == TORCH_ONCE_DIFFERENTIABLE
    # torch's decorator raises only under .backward(); torch.func sees zeros: the note says so
    assert len(result.notes) == 1 and "torch.func transforms" in result.notes[0]


def test_an_op_without_backward_called_under_no_grad_is_silently_zero(
    register: Register,
) -> None:
    # Under no_grad the inner op records nothing: no clear error, a silently zero second
    # derivative. Not once differentiable: a failure.
    inner = register(cos, fake_fn=torch.empty_like)

    def backward(ctx: Any, g: Tensor) -> Tensor:
        with torch.no_grad():
            c = inner(ctx.saved_tensors[0])
        return g * c

    failure = failure_of(register_sin(register, backward))
    assert failure.case == "gradgradcheck, float64"
    assert "the backward's own derivative (the second derivative) disagrees" in str(failure)
    assert failure.mismatch is not None and failure.mismatch.actual == 0


def test_other_errors_of_double_backward_fail(
    register: Register, opreg_namespace: OpNamespace
) -> None:
    # A shape error in the inner op's backward, and a plain RuntimeError worded like opreg's
    # refusal: neither is a clear refusal (only NotDifferentiableError's class counts).
    def broken(ctx: Any, g: Tensor) -> Tensor:
        return g @ torch.ones(g.shape[-1] + 1, 1, dtype=g.dtype)

    def imitation(ctx: Any, g: Tensor) -> Tensor:
        raise RuntimeError(
            "opreg: x was registered without a backward, so it cannot be differentiated."
        )

    for i, inner_backward in enumerate((broken, imitation)):
        inner = register(
            cos,
            name=opreg_namespace.qualname(f"inner{i}"),
            fake_fn=torch.empty_like,
            backward=inner_backward,
        )
        op = register_sin(
            register,
            lambda ctx, g, inner=inner: g * inner(ctx.saved_tensors[0]),
            name=opreg_namespace.qualname(f"outer{i}"),
        )
        failure = failure_of(op)
        assert failure.case == "gradgradcheck, float64"
        assert "double backward raised RuntimeError" in str(failure)
        assert "only opreg's NotDifferentiableError" in str(failure)


def test_an_op_without_jvp_reports_that_forward_mode_raises(register: Register) -> None:
    result = check_autograd(
        register_sin(register, lambda ctx, g: g * torch.cos(ctx.saved_tensors[0]))
    )
    assert result.passed and result.info["forward_ad"] is False
    refusal = result.info["declined"]["forward-mode AD"]
    assert "forward-mode AD" in refusal and "needs a jvp" in refusal
    assert result.notes == []  # most ops have no jvp: the JSON says so, the summary does not


def test_not_differentiable_error_is_opreg_core_public_and_a_runtime_error() -> None:
    error = NotDifferentiableError("opreg: ns::op ...", "ns::op", "forward")
    assert isinstance(error, RuntimeError) and error.op == "ns::op" and error.mode == "forward"
    assert declined(error, "forward") == "opreg: ns::op ..." and declined(error, "reverse") is None
    assert declined(RuntimeError(TORCH_ONCE_DIFFERENTIABLE), "reverse") == TORCH_ONCE_DIFFERENTIABLE
    assert declined(RuntimeError("mat1 and mat2 shapes cannot be multiplied"), "reverse") is None


@pytest.mark.needs_triton
def test_a_backward_calling_a_triton_op_without_backward_on_triton_cpu(
    register: Register, opreg_namespace: OpNamespace
) -> None:
    # The pattern of examples/triton_rmsnorm.py: the backward is a Triton op of its own,
    # registered without a backward (as most Triton libraries do), run by Triton's interpreter.
    import triton
    import triton.language as tl

    from opreg_kernels import register_triton_op

    @triton.jit
    def scale_kernel(g_ptr, x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        g = tl.load(g_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, g * tl.cos(tl.load(x_ptr + offsets, mask=mask)), mask=mask)

    def launch(g: Tensor, x: Tensor) -> Tensor:
        g, x = g.contiguous(), x.contiguous()
        out = torch.empty_like(x)
        scale_kernel[(triton.cdiv(max(x.numel(), 1), 64),)](g, x, out, x.numel(), BLOCK=64)
        return out

    def sin_backward(g: Tensor, x: Tensor) -> Tensor:
        return g * torch.cos(x)

    backward_op = register_triton_op(
        sin_backward,
        name=opreg_namespace.qualname("sin_backward"),
        schema="(Tensor g, Tensor x) -> Tensor",
        fake_fn=lambda g, x: torch.empty(x.shape, dtype=x.dtype, device=x.device),
        triton_fn=launch,
    )
    op = register_sin(register, lambda ctx, g: backward_op(g, ctx.saved_tensors[0]))
    report = check_op(op, checks=["autograd"], device="triton-cpu")
    result = report["autograd"]
    assert result.passed, result.reason
    assert report.device == "triton-cpu" and result.info["once_differentiable"] is True
    assert backward_op.qualname in result.info["declined"]["double backward"]


# -- kernels that compute below float64 (Triton's float32 norm) ----------------------------------


def _float32_mul_ops(
    namespace: OpNamespace, *, f32: bool = True, w_grad_scale: float = 1.0, wrong_jvp: bool = False
) -> tuple[Any, Any]:
    """``x * w`` as a Triton op whose kernel computes in float32 (``f32``; else in the input
    dtype), its backward a Triton op without a backward computing ``(g * w, g * x *
    w_grad_scale)`` the same way, and a PyTorch jvp (``wrong_jvp``: the w tangent dropped). The
    fallbacks are right; returns (op, backward op)."""
    import triton
    import triton.language as tl

    from opreg_kernels import register_triton_op

    @triton.jit
    def mul_kernel(a_ptr, b_ptr, out_ptr, n, scale, BLOCK: tl.constexpr, F32: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        a = tl.load(a_ptr + offsets, mask=mask)
        b = tl.load(b_ptr + offsets, mask=mask)
        if F32:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        tl.store(out_ptr + offsets, (a * b * scale).to(out_ptr.dtype.element_ty), mask=mask)

    def launch(a: Tensor, b: Tensor, scale: float = 1.0) -> Tensor:
        a, b = a.contiguous(), b.expand_as(a).contiguous()
        out = torch.empty_like(a)
        grid = (triton.cdiv(max(a.numel(), 1), 64),)
        mul_kernel[grid](a, b, out, a.numel(), scale, BLOCK=64, F32=f32)
        return out

    def mul_backward(g: Tensor, x: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
        return g * w, g * x

    backward_op = register_triton_op(
        mul_backward,
        name=namespace.qualname("mul_backward"),
        schema="(Tensor g, Tensor x, Tensor w) -> (Tensor, Tensor)",
        fake_fn=lambda g, x, w: (torch.empty_like(x), torch.empty_like(w)),
        triton_fn=lambda g, x, w: (launch(g, w), launch(g, x, w_grad_scale)),
    )

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        ctx.save_for_backward(*inputs)

    def jvp(ctx: Any, x_t: Tensor | None, w_t: Tensor | None) -> Tensor:
        x, w = ctx.saved_tensors
        tangent = torch.zeros_like(x) if x_t is None else x_t * w
        return tangent if w_t is None or wrong_jvp else tangent + x * w_t

    def mul(x: Tensor, w: Tensor) -> Tensor:
        return x * w

    def float32_samples(device: torch.device) -> Iterator[SampleInput]:
        g = torch.Generator().manual_seed(3)
        x, w = torch.randn(3, 5, generator=g), torch.randn(3, 5, generator=g)
        yield SampleInput((x.to(device), w.to(device)), name="3x5")

    op = register_triton_op(
        mul,
        name=namespace.qualname("mul"),
        schema="(Tensor x, Tensor w) -> Tensor",
        fake_fn=lambda x, w: torch.empty_like(x),
        triton_fn=launch,
        setup_context=setup,
        backward=lambda ctx, g: backward_op(g, *ctx.saved_tensors),
        jvp=jvp,
        sample_inputs=float32_samples,
    )
    return op, backward_op


@pytest.mark.needs_triton
def test_a_triton_kernel_computing_in_float32_passes_on_the_fallbacks_finite_differences(
    opreg_namespace: OpNamespace,
) -> None:
    # Issue: finite differences in float64 through a float32 kernel failed a correct op with
    # "Jacobian mismatch". They now run on the fallbacks; the kernels' derivatives are
    # compared with the fallbacks' at float32 tolerance.
    from opreg_kernels import triton_kernel_info

    op, backward_op = _float32_mul_ops(opreg_namespace)
    report = check_op(op, checks=["autograd", "kernel"], device="triton-cpu")
    result = report["autograd"]
    assert result.passed, result.reason
    assert report["kernel"].passed, report["kernel"].reason
    assert result.info["kernel_precision"] == "float32"
    assert "taken off" in result.info["finite_differences_on"]
    assert result.info["once_differentiable"] is True  # the backward op has no backward
    assert result.info["forward_ad"] is True
    assert any("float32 tolerance" in note for note in result.notes), result.notes
    # the Triton kernels served the CPU again after the fallbacks ran, and are gone after
    assert "cpu" not in triton_kernel_info(op).device_types
    assert "cpu" not in triton_kernel_info(backward_op).device_types


@pytest.mark.needs_triton
def test_triton_kernels_taken_off_for_the_fallbacks_serve_again_afterwards(
    opreg_namespace: OpNamespace,
) -> None:
    from opreg_kernels import triton_kernel_info

    op, backward_op = _float32_mul_ops(opreg_namespace)
    with triton_device("cpu", [op, backward_op]):
        result = check_autograd(op, functorch=False)
        assert result.info["kernel_precision"] == "float32"
        assert "cpu" in triton_kernel_info(op).device_types
        assert "cpu" in triton_kernel_info(backward_op).device_types
        x, w = torch.randn(4), torch.randn(4)
        torch.testing.assert_close(op(x, w), x * w)


@pytest.mark.needs_triton
def test_a_float32_triton_backward_kernel_that_is_wrong_is_caught(
    opreg_namespace: OpNamespace,
) -> None:
    op, _ = _float32_mul_ops(opreg_namespace, w_grad_scale=0.5)
    report = check_op(op, checks=["autograd"], device="triton-cpu")
    failure = report["autograd"].failure
    assert failure is not None, report.summary()
    assert "backward (vjp) through the Triton kernels on 'cpu' differs" in failure.problem
    assert failure.mismatch is not None and failure.mismatch.where == "the gradient of w"
    assert failure.case is not None and "float32 tolerance" in failure.case


@pytest.mark.needs_triton
def test_a_wrong_jvp_of_a_float32_triton_op_is_caught_on_the_fallbacks(
    opreg_namespace: OpNamespace,
) -> None:
    op, _ = _float32_mul_ops(opreg_namespace, wrong_jvp=True)
    report = check_op(op, checks=["autograd"], device="triton-cpu")
    failure = report["autograd"].failure
    assert failure is not None, report.summary()
    assert "the jvp disagrees with finite differences" in failure.problem
    assert failure.case is not None and failure.case.endswith("taken off)")


@pytest.mark.needs_triton
def test_a_triton_kernel_computing_in_float64_keeps_finite_differences_on_the_kernel(
    opreg_namespace: OpNamespace,
) -> None:
    # No weakening for kernels that compute in the input dtype: finite differences run through
    # the kernels, so a wrong backward kernel fails gradcheck itself.
    op, _ = _float32_mul_ops(opreg_namespace, f32=False)
    result = check_op(op, checks=["autograd"], device="triton-cpu")["autograd"]
    assert result.passed, result.reason
    assert result.info["kernel_precision"] == "float64"
    assert "finite_differences_on" not in result.info

    other = OpNamespace(opreg_namespace.name + "_wrong")
    wrong, _ = _float32_mul_ops(other, f32=False, w_grad_scale=0.5)
    try:
        failure = check_op(wrong, checks=["autograd"], device="triton-cpu")["autograd"].failure
    finally:
        other.clear()
    assert failure is not None and failure.case is not None
    assert failure.case.startswith("gradcheck, float64") and "taken off" not in failure.case


def test_an_op_without_kernel_reports_no_kernel_precision(register: Register) -> None:
    op = register_sin(register, lambda ctx, g: g * torch.cos(ctx.saved_tensors[0]))
    result = check_autograd(op)
    assert "kernel_precision" not in result.info and "finite_differences_on" not in result.info
