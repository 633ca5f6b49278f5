"""fused_add on its PyTorch fallback: values, errors, autograd, vmap, compile, opcheck."""

from __future__ import annotations

import pytest
import torch

from opreg_kernels import fused_add

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_torch_add(dtype: torch.dtype) -> None:
    x = (torch.randn(5, 7) * 100).to(dtype)
    y = (torch.randn(5, 7) * 100).to(dtype)
    out = fused_add(x, y)
    assert out.dtype == dtype and out.is_contiguous()
    assert torch.equal(out, x + y)


def test_non_contiguous_inputs_give_a_contiguous_result() -> None:
    x = torch.randn(4, 6).t()
    y = torch.randn(6, 4)
    out = fused_add(x, y)
    assert out.is_contiguous()
    assert torch.equal(out, x + y)


def test_bad_inputs_raise_errors_naming_the_op() -> None:
    x = torch.randn(3)
    with pytest.raises(TypeError, match=r"opreg::fused_add.*same dtype"):
        fused_add(x, x.double())
    with pytest.raises(ValueError, match=r"opreg::fused_add.*same shape"):
        fused_add(x, torch.randn(1))
    with pytest.raises(TypeError, match=r"opreg::fused_add.*not supported"):
        fused_add(x > 0, x > 0)
    # Under torch.compile the fake raises the same error (Dynamo wraps it in its own type).
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError, match=r"opreg::fused_add.*same shape"):
        torch.compile(fused_add, fullgraph=True)(x, torch.randn(2))


def test_gradients_flow_to_both_inputs() -> None:
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    y = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(4, 3, dtype=torch.float64)
    (fused_add(x, y) * weights).sum().backward()
    assert torch.equal(x.grad, weights) and torch.equal(y.grad, weights)  # type: ignore[arg-type]
    assert torch.autograd.gradcheck(fused_add, (x, y))
    gx, gy = torch.func.grad(lambda a, b: fused_add(a, b).pow(2).sum(), argnums=(0, 1))(x, y)
    torch.testing.assert_close(gx, 2 * (x + y))
    torch.testing.assert_close(gy, 2 * (x + y))


def test_forward_mode_tangents_add() -> None:
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    y = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    assert fused_add.has_jvp
    assert torch.autograd.gradcheck(fused_add, (x, y), check_forward_ad=True)
    tx, ty = torch.randn_like(x), torch.randn_like(y)
    primal, tangent = torch.func.jvp(fused_add, (x.detach(), y.detach()), (tx, ty))
    assert torch.equal(primal, x + y) and torch.equal(tangent, tx + ty)
    # one input without a tangent; under vmap (the batched op's jvp); a Hessian
    _, tangent = torch.func.jvp(lambda a: fused_add(a, y.detach()), (x.detach(),), (tx,))
    assert torch.equal(tangent, tx)
    _, tangent = torch.func.jvp(torch.vmap(fused_add), (x.detach(), y.detach()), (tx, ty))
    assert torch.equal(tangent, tx + ty)
    a = x.detach()[0]
    h = torch.func.hessian(lambda v: fused_add(v, v).pow(3).sum())(a)
    torch.testing.assert_close(h, torch.diag(48 * a))


def test_vmap_with_every_in_dims_pattern_matches_broadcast_add() -> None:
    x = torch.randn(3, 4, 5)
    y = torch.randn(4, 3, 5)
    stats = fused_add.vmap_stats
    stats.reset()
    assert torch.equal(torch.vmap(fused_add, in_dims=(0, 1))(x, y), x + y.transpose(0, 1))
    assert torch.equal(torch.vmap(fused_add, in_dims=(None, 0))(x[0], x), x[0] + x)
    nested = torch.vmap(torch.vmap(fused_add, in_dims=(0, 1)), in_dims=(2, 2))(x, y)
    assert torch.equal(nested, (x + y.transpose(0, 1)).permute(2, 0, 1))
    assert stats.fast == 3 and stats.nested == 1 and stats.loop == 0
    grads = torch.vmap(torch.func.grad(lambda a, b: fused_add(a, b).sum()))(x, x)
    assert torch.equal(grads, torch.ones_like(x))


def test_torch_compile_fullgraph_matches_eager() -> None:
    torch._dynamo.reset()

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return fused_add(a, b) * 2

    x, y = torch.randn(8), torch.randn(8)
    assert torch.equal(torch.compile(f, fullgraph=True)(x, y), f(x, y))
    batched = torch.compile(torch.vmap(fused_add), fullgraph=True)(x.reshape(2, 4), y.reshape(2, 4))
    assert torch.equal(batched, (x + y).reshape(2, 4))


def test_opcheck_passes_on_the_sample_inputs() -> None:
    assert fused_add.sample_inputs is not None
    for sample in fused_add.sample_inputs(torch.device("cpu")):
        torch.library.opcheck(fused_add, sample.args, sample.kwargs)
