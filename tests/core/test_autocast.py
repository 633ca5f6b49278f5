"""The ``autocast`` option: under ``torch.autocast`` an op with a rule casts its inputs as ATen
ops of the same policy do, in every way of calling it. Each test compares with plain PyTorch
ops under the same autocast region: ``torch.mm`` (ATen's ``lower_precision_fp`` list) for
``"lower_precision"``, ``mse_loss`` (ATen's ``fp32`` list on CPU) for ``"float32"``; the
softmax-like op is compared with ``softmax`` of float32 inputs, which is what ATen's softmax
gives under CUDA autocast (on CPU softmax has no autocast policy).

On CPU, ``torch.autocast("cpu", dtype=torch.bfloat16)``; the CUDA counterparts (CUDA graphs
included) are in ``tests/kernels/test_gpu.py``."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from opreg_core import register_vmap_op, unregister

DIRECT, DISPATCHER = "direct", "dispatcher"
BF16 = torch.bfloat16


def autocast(enabled: bool = True, dtype: torch.dtype = BF16) -> Any:
    return torch.autocast("cpu", dtype=dtype, enabled=enabled)


# -- ops ------------------------------------------------------------------------------------------
#: The dtypes each op's function saw, last call first (the kernel sees the cast dtypes).
SEEN: list[tuple[torch.dtype, ...]] = []


def _mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    SEEN.insert(0, (x.dtype, w.dtype))
    return torch.mm(x, w)


def _mm_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(*inputs)


def _mm_backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, w = ctx.saved_tensors
    return g @ w.T, x.T @ g


def _mm_jvp(ctx: Any, tx: torch.Tensor | None, tw: torch.Tensor | None) -> torch.Tensor:
    x, w = ctx.saved_tensors
    out = torch.zeros(x.shape[0], w.shape[1], dtype=x.dtype)
    if tx is not None:
        out = out + tx @ w
    if tw is not None:
        out = out + x @ tw
    return out


def _bmm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    SEEN.insert(0, (x.dtype, w.dtype))
    return torch.bmm(x, w)


def _mm_fake(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], w.shape[1])


def _bmm_fake(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], x.shape[1], w.shape[2])


def register_mm(ns: str, name: str = "mm", **options: Any) -> Any:
    """``x @ w`` with a backward, a jvp and a ``vmap_fn`` (``bmm``)."""
    options = {"autocast": "lower_precision", **options}
    return register_vmap_op(
        _mm,
        name=f"{ns}::{name}",
        fake_fn=_mm_fake,
        vmap_fn=_bmm,
        fake_vmap_fn=_bmm_fake,
        backward=_mm_backward,
        setup_context=_mm_setup,
        jvp=_mm_jvp,
        **options,
    )


@pytest.fixture
def mm(ns: str) -> Any:
    return register_mm(ns)


def _softmax(x: torch.Tensor) -> torch.Tensor:
    SEEN.insert(0, (x.dtype,))
    return torch.softmax(x, -1)


def _softmax_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.save_for_backward(output)


def _softmax_backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
    (y,) = ctx.saved_tensors
    return y * (g - (g * y).sum(-1, keepdim=True))


@pytest.fixture
def softmax(ns: str) -> Any:
    """``softmax(x, -1)``, upcast to float32 (as ATen's softmax is under autocast)."""
    return register_vmap_op(
        _softmax,
        name=f"{ns}::softmax",
        fake_fn=torch.empty_like,
        backward=_softmax_backward,
        setup_context=_softmax_setup,
        autocast="float32",
    )


def _rows(
    x: torch.Tensor, w: torch.Tensor, index: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    SEEN.insert(0, (x.dtype, w.dtype, index.dtype, mask.dtype))
    return torch.mm(x, w).index_select(0, index) * mask.unsqueeze(1)


@pytest.fixture
def rows(ns: str) -> Any:
    """Floating, integer and bool inputs: only the floating ones are cast."""
    return register_vmap_op(
        _rows,
        name=f"{ns}::rows",
        fake_fn=lambda x, w, index, mask: x.new_empty(index.shape[0], w.shape[1]),
        autocast="lower_precision",
        differentiable=False,
    )


def _x_w(requires_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(5, 6, requires_grad=requires_grad)
    w = torch.randn(6, 3, requires_grad=requires_grad)
    return x, w


def _same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected)


# -- eager: dtypes and values as ATen's ------------------------------------------------------------


def test_lower_precision_runs_in_the_region_dtype_as_mm(mm: Any, route: Any) -> None:
    x, w = _x_w()
    with autocast():
        path, out = route(mm, x, w)
        expected = torch.mm(x, w)
    assert path == DISPATCHER  # the direct call leaves a call with a rule to the dispatcher
    assert SEEN[0] == (BF16, BF16)
    _same(out, expected)
    with autocast(dtype=torch.float16):
        _same(mm(x, w), torch.mm(x, w))
    assert SEEN[0] == (torch.float16, torch.float16)
    path, out = route(mm, x, w)  # outside the region: the direct call, no cast
    assert (path, out.dtype, SEEN[0]) == (DIRECT, torch.float32, (torch.float32,) * 2)


def _sq_err(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    SEEN.insert(0, (x.dtype, y.dtype))
    return (x - y).square().mean()


def test_float32_upcasts_as_mse_loss(ns: str) -> None:
    op = register_vmap_op(
        _sq_err, name=f"{ns}::sq_err", fake_fn=lambda x, y: x.new_empty(()), autocast="float32"
    )
    x, y = torch.randn(4, 7).to(BF16), torch.randn(4, 7)
    with autocast():
        _same(op(x, y), torch.nn.functional.mse_loss(x, y))
    assert SEEN[0] == (torch.float32, torch.float32)
    assert op(x, x).dtype == BF16  # no region: as given


def test_float32_upcasts_softmax(softmax: Any) -> None:
    x = torch.randn(4, 7).to(BF16)
    with autocast():
        out = softmax(x)
    assert SEEN[0] == (torch.float32,)
    _same(out, torch.softmax(x.float(), -1))
    assert softmax(x).dtype == BF16  # no region: as given


def test_only_floating_inputs_on_the_device_and_not_float64_are_cast(rows: Any) -> None:
    x, w = _x_w()
    index, mask = torch.tensor([0, 2, 2]), torch.tensor([True, False, True])
    with autocast():
        out = rows(x, w, index, mask)
        expected = torch.mm(x, w).index_select(0, index) * mask.unsqueeze(1)
        assert SEEN[0] == (BF16, BF16, torch.int64, torch.bool)
        _same(out, expected)
        rows(x.double(), w.double(), index, mask)
        assert SEEN[0][:2] == (torch.float64, torch.float64)
        assert torch.mm(x.double(), w.double()).dtype == torch.float64  # as ATen
        rows(x.to(BF16), w, index, mask)  # a bf16 input stays bf16
        assert SEEN[0][:2] == (BF16, BF16)


def test_a_mapping_gives_each_device_type_its_dtype(ns: str) -> None:
    op = register_mm(ns, autocast={"cpu": torch.float16, "cuda": "float32"})
    assert dict(op.autocast) == {"cpu": torch.float16, "cuda": torch.float32}
    x, w = _x_w()
    with autocast():
        assert op(x, w).dtype == torch.float16
    assert SEEN[0] == (torch.float16, torch.float16)
    with torch.autocast("cuda", dtype=torch.float16):  # a region of another device type
        assert op(x, w).dtype == torch.float32
    assert SEEN[0] == (torch.float32, torch.float32)


def test_a_region_of_another_device_type_leaves_cpu_tensors_alone(mm: Any) -> None:
    x, w = _x_w()
    with torch.autocast("cuda", dtype=torch.float16):
        assert mm(x, w).dtype == torch.mm(x, w).dtype == torch.float32


def test_nested_and_disabled_regions_behave_as_aten(mm: Any, softmax: Any) -> None:
    x, w = _x_w()
    with autocast(dtype=torch.float16):
        with autocast(dtype=BF16):
            _same(mm(x, w), torch.mm(x, w))
            with autocast(enabled=False):
                _same(mm(x, w), torch.mm(x, w))
                assert SEEN[0] == (torch.float32, torch.float32)
                _same(softmax(x.to(BF16)), torch.softmax(x.to(BF16), -1))
                assert SEEN[0] == (BF16,)
            _same(softmax(x.to(BF16)), torch.softmax(x.to(BF16).float(), -1))
            assert SEEN[0] == (torch.float32,)
            _same(mm(x, w), torch.mm(x, w))
            assert SEEN[0] == (BF16, BF16)
        _same(mm(x, w), torch.mm(x, w))
        assert SEEN[0] == (torch.float16, torch.float16)


def test_an_op_without_a_rule_is_unaffected_and_keeps_the_direct_call(ns: str, route: Any) -> None:
    def scale(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        SEEN.insert(0, (x.dtype, w.dtype))
        return x * w

    op = register_vmap_op(scale, name=f"{ns}::scale", fake_fn=lambda x, w: torch.empty_like(x))
    assert op.autocast is None
    x = torch.randn(3, 4)
    with autocast():
        path, out = route(op, x, x)
        _same(out, torch.mul(x, x))  # mul has no autocast policy either
    assert (path, SEEN[0]) == (DIRECT, (torch.float32, torch.float32))


def test_keyword_only_and_list_arguments_are_cast(ns: str) -> None:
    def weighted(xs: list[torch.Tensor], *, scale: torch.Tensor, n: int) -> torch.Tensor:
        SEEN.insert(0, (*(x.dtype for x in xs), scale.dtype))
        return sum(xs, torch.zeros_like(xs[0])) * scale * n

    op = register_vmap_op(
        weighted,
        name=f"{ns}::weighted",
        fake_fn=lambda xs, *, scale, n: torch.empty_like(xs[0]),
        autocast="lower_precision",
    )
    xs, scale = [torch.randn(3), torch.randn(3)], torch.randn(3)
    with autocast():
        out = op(xs, scale=scale, n=2)
    assert SEEN[0] == (BF16, BF16, BF16)
    expected = (xs[0].to(BF16) + xs[1].to(BF16)) * scale.to(BF16) * 2
    _same(out, expected)


# -- autograd and forward AD -------------------------------------------------------------------


def test_backward_gives_gradients_in_the_input_dtype_as_mm(mm: Any) -> None:
    x, w = _x_w(requires_grad=True)
    x2, w2 = (t.detach().clone().requires_grad_() for t in (x, w))
    with autocast():
        out, expected = mm(x, w), torch.mm(x2, w2)
    _same(out, expected)
    g = torch.randn_like(out)
    out.backward(g)
    expected.backward(g)
    for a, e in ((x, x2), (w, w2)):
        assert a.grad is not None and e.grad is not None
        _same(a.grad, e.grad)
        assert a.grad.dtype == torch.float32


def test_float32_backward_gives_bf16_gradients_for_bf16_inputs(softmax: Any) -> None:
    x = torch.randn(4, 7).to(BF16).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    g = torch.randn(4, 7)
    with autocast():
        softmax(x).backward(g)
    torch.softmax(x2.float(), -1).backward(g)
    assert x.grad is not None and x2.grad is not None
    _same(x.grad, x2.grad)


def test_torch_func_grad_matches_mm(mm: Any) -> None:
    x, w = _x_w()
    with autocast():
        got = torch.func.grad(lambda a: mm(a, w).float().square().sum())(x)
        expected = torch.func.grad(lambda a: torch.mm(a, w).float().square().sum())(x)
    _same(got, expected)


def test_forward_ad_matches_mm(mm: Any) -> None:
    x, w = _x_w()
    t = torch.randn_like(x)
    with autocast():
        got = torch.func.jvp(lambda a: mm(a, w), (x,), (t,))
        expected = torch.func.jvp(lambda a: torch.mm(a, w), (x,), (t,))
        for a, e in zip(got, expected, strict=True):
            _same(a, e)
        with torch.autograd.forward_ad.dual_level():
            dual = torch.autograd.forward_ad.make_dual(x, t)
            out = torch.autograd.forward_ad.unpack_dual(mm(dual, w))
            ref = torch.autograd.forward_ad.unpack_dual(torch.mm(dual, w))
    _same(out.primal, ref.primal)
    assert out.tangent is not None and ref.tangent is not None
    _same(out.tangent, ref.tangent)


# -- vmap ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [1, 2])
def test_vmap_casts_as_aten_below_the_levels(mm: Any, depth: int) -> None:
    x, w = torch.randn(2, 3, 5, 6), torch.randn(2, 3, 6, 4)
    if depth == 1:
        x, w = x[0], w[0]
    f, g = mm, torch.mm
    for _ in range(depth):
        f, g = torch.vmap(f), torch.vmap(g)
    with autocast():
        _same(f(x, w), g(x, w))
    assert SEEN[0] == (BF16, BF16)  # vmap_fn, once, on the cast inputs
    _same(f(x, w), g(x, w))  # and outside the region, float32 (the fold included)
    assert SEEN[0] == (torch.float32, torch.float32)


def test_vmap_of_grad_matches_mm(mm: Any) -> None:
    x, w = torch.randn(3, 5, 6), torch.randn(6, 4)

    def loss(f: Any) -> Any:
        return lambda a: f(a, w).float().sum()

    with autocast():
        got = torch.vmap(torch.func.grad(loss(mm)))(x)
        expected = torch.vmap(torch.func.grad(loss(torch.mm)))(x)
    _same(got, expected)


# -- the fake, torch.compile ---------------------------------------------------------------------


def test_the_fake_sees_the_cast(mm: Any) -> None:
    x, w = _x_w()
    with FakeTensorMode() as mode, autocast():
        fx, fw = mode.from_tensor(x), mode.from_tensor(w)
        assert mm(fx, fw).dtype == torch.mm(fx, fw).dtype == BF16


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_with_the_region_outside(mm: Any, backend: str) -> None:
    x, w = _x_w(requires_grad=True)
    compiled = torch.compile(lambda a, b: mm(a, b).float().sum(), fullgraph=True, backend=backend)
    with autocast():
        loss = compiled(x, w)
        expected = torch.mm(x, w).float().sum()
    _same(loss, expected)
    loss.backward()
    assert x.grad is not None and x.grad.dtype == torch.float32
    assert compiled(x, w).dtype == torch.float32


def test_compile_with_the_region_inside(mm: Any, softmax: Any) -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=BF16):
            h = mm(a, b)
            return softmax(h)

    def ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=BF16):
            return torch.softmax(torch.mm(a, b).float(), -1)

    x, w = _x_w()
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    _same(compiled(x, w), ref(x, w))


# -- differentiable=False -----------------------------------------------------------------------


def test_non_differentiable_op_casts_and_records_nothing(rows: Any) -> None:
    x, w = _x_w(requires_grad=True)
    index, mask = torch.tensor([1, 0]), torch.tensor([True, True])
    with autocast():
        out = rows(x, w, index, mask)
        expected = torch.mm(x, w).index_select(0, index).detach()
    assert not out.requires_grad
    _same(out, expected)


# -- registration ---------------------------------------------------------------------------------


def test_unregister_and_re_registration_drop_the_rule(ns: str) -> None:
    x, w = _x_w()
    register_mm(ns)
    op = register_mm(ns, autocast=None)  # the same name again, without a rule
    with autocast():  # the function gets its inputs as given (its torch.mm then autocasts)
        op(x, w)
        assert SEEN[0] == (torch.float32, torch.float32)
        op.overload(x, w)
        assert SEEN[0] == (torch.float32, torch.float32)
        torch.vmap(op)(x[None], w[None])
        assert SEEN[0] == (torch.float32, torch.float32)
    op = register_mm(ns)
    keys = {(r.operator.split("::")[1], r.dispatch_key) for r in op.registrations}
    suffixes = ("", "__opreg_batched", "__opreg_batched_nograd")
    assert {("mm" + s, k) for s in suffixes for k in ("AutocastCPU", "AutocastCUDA")} <= keys
    unregister(op.qualname)
    assert not hasattr(torch.ops, ns) or not hasattr(getattr(torch.ops, ns), "mm")


def test_a_mutating_op_cannot_have_a_rule(ns: str) -> None:
    def scale_(x: torch.Tensor) -> None:
        x.mul_(2)

    with pytest.raises(ValueError, match=f"^opreg: {ns}::scale_: autocast is not supported for "):
        register_vmap_op(
            scale_,
            name=f"{ns}::scale_",
            fake_fn=lambda x: None,
            mutates_args=("x",),
            autocast="lower_precision",
        )


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ("bfloat16", ValueError, "autocast must be 'lower_precision', 'float32' or a floating"),
        (torch.bfloat16, TypeError, r'a dtype needs its device type: \{"cuda"'),
        ({"cpu": torch.int32}, ValueError, r"autocast\['cpu'\] must be a floating dtype"),
        ({"meta": torch.float16}, ValueError, "'meta' is not a device type with autocast"),
        ({"cuda:0": torch.float16}, ValueError, "'cuda:0' is not a device type with autocast"),
        ({"cpu": "fp16"}, ValueError, r"autocast\['cpu'\] must be 'lower_precision'"),
        ({}, ValueError, "autocast is an empty mapping"),
        ({1: torch.float16}, TypeError, "autocast keys must be device type names"),
        (["cpu"], TypeError, "autocast must be 'lower_precision', 'float32' or a mapping"),
    ],
)
def test_bad_values_are_refused_naming_the_op(
    ns: str, value: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"^opreg: {ns}::mm: .*{message}"):
        register_mm(ns, autocast=value)
