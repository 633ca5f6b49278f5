"""The direct call (``opreg_core._call_path``): an op object takes the dispatcher's route
itself when only plain tensors take part and nothing could route the call differently, and
leaves every other call to the dispatcher. Each test says which route a call takes (a spy on
the op's entry into the dispatcher) and that the results, gradients and errors are the
dispatcher's."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from opreg_core import register_vmap_op, unregister

DIRECT, DISPATCHER = "direct", "dispatcher"


# -- ops ------------------------------------------------------------------------------------------


def _scale_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, w, alpha, flag = inputs
    ctx.save_for_backward(x, w)
    ctx.alpha, ctx.flag = alpha, flag


def _scale_backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
    x, w = ctx.saved_tensors
    sign = -1.0 if ctx.flag else 1.0
    return g * w * ctx.alpha * sign, (g * x * ctx.alpha * sign).sum(0), None, None


def _scale(x: torch.Tensor, w: torch.Tensor, alpha: float, flag: bool) -> torch.Tensor:
    return x * w * alpha * (-1.0 if flag else 1.0)


@pytest.fixture
def scale(ns: str) -> Any:
    """Two tensors (``w`` broadcast over ``x``'s rows) and two scalars, with a backward."""
    return register_vmap_op(
        _scale,
        name=f"{ns}::scale",
        fake_fn=lambda x, w, alpha, flag: torch.empty_like(x),
        backward=_scale_backward,
        setup_context=_scale_setup,
    )


def _args(requires_grad: bool = True) -> tuple[Any, ...]:
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=requires_grad)
    w = torch.randn(4, dtype=torch.float64, requires_grad=requires_grad)
    return x, w, 0.5, True


def _same_grads(op: Any, args: tuple[Any, ...]) -> None:
    """The op's output and gradients through the op object equal those through ``torch.ops``."""
    overload = op.overload
    x, w = args[0], args[1]
    outs, grads = [], []
    for call in (op, overload):
        out = call(*args)
        outs.append(out)
        grads.append(torch.autograd.grad(out.sum(), (x, w)))
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)
    assert outs[0].grad_fn.name() == outs[1].grad_fn.name()
    for a, b in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# -- the direct route --------------------------------------------------------------------------


def test_plain_tensors_take_the_direct_route_with_the_dispatchers_results(
    route: Any, scale: Any
) -> None:
    args = _args()
    taken, out = route(scale, *args)
    assert taken == DIRECT
    assert out.requires_grad and out.grad_fn is not None
    _same_grads(scale, args)


def test_parameters_and_non_contiguous_tensors_are_plain(route: Any, scale: Any) -> None:
    x = torch.randn(4, 3, dtype=torch.float64).t().requires_grad_()
    w = torch.nn.Parameter(torch.randn(4, dtype=torch.float64))
    assert route(scale, x, w, 0.5, False)[0] == DIRECT
    _same_grads(scale, (x, w, 0.5, False))


@pytest.mark.parametrize(
    "mode", [torch.no_grad, torch.inference_mode, contextlib.nullcontext], ids=str
)
def test_no_input_needing_grad_runs_the_kernel_alone(route: Any, scale: Any, mode: Any) -> None:
    args = _args(requires_grad=mode is not contextlib.nullcontext)
    with mode():
        taken, out = route(scale, *args)
        expected = scale.overload(*args)
    assert taken == DIRECT
    assert not out.requires_grad and out.grad_fn is None
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_a_closed_over_tensor_requiring_grad_is_recorded_as_the_dispatcher_does(
    route: Any, ns: str
) -> None:
    """Without an input requiring grad the dispatcher runs the kernel below the op's autograd
    kernel with grad mode as it is, so a tensor the kernel closes over is recorded through; the
    direct route does the same (what the op's own backward would say is not asked)."""
    weight = torch.randn(3, requires_grad=True)

    def closes_over(x: torch.Tensor) -> torch.Tensor:
        return x * weight

    op = register_vmap_op(closes_over, name=f"{ns}::closes_over", fake_fn=torch.empty_like)
    x = torch.randn(3)
    taken, out = route(op, x)
    assert taken == DIRECT
    assert out.requires_grad is op.overload(x).requires_grad is True


def test_the_default_op_records_and_its_backward_refuses(route: Any, ns: str) -> None:
    op = register_vmap_op(lambda x: x * 2, schema="(Tensor x) -> Tensor", name=f"{ns}::f",
                          fake_fn=torch.empty_like)  # fmt: skip
    x = torch.randn(3, requires_grad=True)
    taken, out = route(op, x)
    assert taken == DIRECT
    with pytest.raises(RuntimeError, match=f"{ns}::f"):
        out.sum().backward()


def test_an_optional_tensor_and_several_outputs(route: Any, ns: str) -> None:
    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.has_bias = inputs[1] is not None

    def backward(ctx: Any, ga: torch.Tensor, gb: torch.Tensor) -> tuple[Any, ...]:
        return ga + 2 * gb, (ga.sum(0) if ctx.has_bias else None)

    def two(x: torch.Tensor, bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        b = 0 if bias is None else bias
        return [x + b, x * 2]  # type: ignore[return-value]  # a list: the dispatcher gives a tuple

    op = register_vmap_op(
        two,
        name=f"{ns}::two",
        fake_fn=lambda x, bias: (torch.empty_like(x), torch.empty_like(x)),
        backward=backward,
        setup_context=setup,
    )
    x = torch.randn(2, 3, requires_grad=True)
    for bias in (None, torch.randn(3, requires_grad=True)):
        taken, out = route(op, x, bias)
        assert taken == DIRECT
        assert type(out) is tuple and len(out) == 2
        reference = op.overload(x, bias)
        for a, b in zip(out, reference, strict=True):
            torch.testing.assert_close(a, b)
        grads = torch.autograd.grad(sum(o.sum() for o in out), x)
        expected = torch.autograd.grad(sum(o.sum() for o in reference), x)
        torch.testing.assert_close(grads, expected)


# -- calls the dispatcher routes differently --------------------------------------------------


def test_keywords_defaults_and_other_scalar_types_go_to_the_dispatcher(route: Any, ns: str) -> None:
    seen: list[tuple[type, type]] = []

    def f(x: torch.Tensor, alpha: float = 2.0, n: int = 1) -> torch.Tensor:
        seen.append((type(alpha), type(n)))
        return x * alpha * n

    op = register_vmap_op(
        f, name=f"{ns}::f", fake_fn=lambda x, alpha=2.0, n=1: x.new_empty(x.shape)
    )
    x = torch.randn(3)
    assert route(op, x, 2.0, 3)[0] == DIRECT
    assert route(op, x, alpha=2.0, n=3)[0] == DISPATCHER
    assert route(op, x)[0] == DISPATCHER  # defaults: the dispatcher fills them in
    seen.clear()
    taken, out = route(op, x, 2, True)  # an int for a float, a bool for an int: converted
    assert taken == DISPATCHER
    assert seen == [(float, int)]
    torch.testing.assert_close(out, x * 2.0)


class _Seen(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


class _SeenFunctions(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.funcs: list[Any] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.funcs.append(func)
        return func(*args, **(kwargs or {}))


def test_modes_see_the_operator(route: Any, scale: Any) -> None:
    args = _args()
    with _Seen() as mode:
        taken, _ = route(scale, *args)
    assert taken == DISPATCHER
    assert f"{scale.namespace}.{scale.opname}.default" in mode.ops
    with _SeenFunctions() as function_mode:
        taken, _ = route(scale, *args)
    assert taken == DISPATCHER
    assert any(getattr(f, "__name__", "") == scale.overload.__name__ for f in function_mode.funcs)
    with torch.device("cpu"):  # a function mode too
        assert route(scale, *args)[0] == DISPATCHER


def test_fake_and_meta_tensors_get_the_fake(route: Any, ns: str) -> None:
    calls: list[str] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        calls.append("fallback")
        return x * 2

    def fake(x: torch.Tensor) -> torch.Tensor:
        calls.append("fake")
        return torch.empty_like(x)

    op = register_vmap_op(f, name=f"{ns}::f", fake_fn=fake)
    taken, out = route(op, torch.empty(3, device="meta"))
    assert taken == DISPATCHER and out.device.type == "meta" and calls == ["fake"]
    from torch._subclasses.fake_tensor import FakeTensorMode

    calls.clear()
    with FakeTensorMode() as fake_mode:
        taken, _ = route(op, fake_mode.from_tensor(torch.randn(3)))
    assert taken == DISPATCHER and calls == ["fake"]


def test_functorch_transforms_and_dual_tensors_go_to_the_dispatcher(route: Any, scale: Any) -> None:
    x, w, alpha, flag = _args(requires_grad=False)
    taken: list[str] = []

    def probe(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        t, out = route(scale, x, w, alpha, flag)
        taken.append(t)
        return out.sum()

    torch.func.grad(probe)(x, w)
    torch.func.vmap(probe, in_dims=(0, None))(x, w)
    assert taken == [DISPATCHER] * 2
    with pytest.raises(Exception, match="jvp"):  # no jvp rule: the dispatcher's clear refusal
        torch.func.jvp(lambda x: probe(x, w), (x,), (torch.ones_like(x),))
    import torch.autograd.forward_ad as fwAD

    with fwAD.dual_level():
        dual = fwAD.make_dual(x, torch.ones_like(x))
        with pytest.raises(Exception, match="jvp"):
            route(scale, dual, w, alpha, flag)


def test_compile_and_export_see_the_operator(scale: Any) -> None:
    from torch._dynamo.testing import EagerAndRecordGraphs

    backend = EagerAndRecordGraphs()
    args = _args(requires_grad=False)
    compiled = torch.compile(lambda *a: scale(*a), backend=backend, fullgraph=True)
    torch.testing.assert_close(compiled(*args), scale.overload(*args))
    assert f"torch.ops.{scale.namespace}.{scale.opname}.default" in backend.graphs[0].code


def test_the_profiler_and_jit_trace_see_the_operator(route: Any, scale: Any) -> None:
    args = _args(requires_grad=False)
    with torch.profiler.profile() as prof:
        taken, _ = route(scale, *args)
    assert taken == DISPATCHER
    assert any(e.name == scale.qualname for e in prof.events())
    traced = torch.jit.trace(lambda x, w: scale(x, w, 0.5, True), args[:2])
    assert scale.qualname in str(traced.graph)


class _Logged(torch.Tensor):
    """A subclass with its own ``__torch_function__``: it must see the op."""

    seen: list[Any] = []  # noqa: RUF012

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        cls.seen.append(func)
        return super().__torch_function__(func, types, args, kwargs or {})


def test_subclasses_see_the_operator(route: Any, scale: Any) -> None:
    x, w, alpha, flag = _args(requires_grad=False)
    _Logged.seen.clear()
    taken, _ = route(scale, x.as_subclass(_Logged), w, alpha, flag)
    assert taken == DISPATCHER
    assert _Logged.seen
    from torch.testing._internal.two_tensor import TwoTensor

    taken, out = route(scale, TwoTensor(x, x.clone()), w, alpha, flag)
    assert taken == DISPATCHER and type(out) is TwoTensor


def test_below_autograd_nothing_is_recorded(route: Any, scale: Any) -> None:
    """Below autograd with grad mode on (where the dispatcher runs an op's kernels for a call it
    does not record, or inside ``torch.inference_mode``), the dispatcher skips the op's
    Autograd kernel: the op records nothing, on either route."""
    args = _args()
    with torch._C._AutoDispatchBelowAutograd():
        assert torch.is_grad_enabled()
        taken, out = route(scale, *args)
        expected = scale.overload(*args)
    assert taken == DISPATCHER
    assert out.requires_grad is expected.requires_grad is False


# -- per-device kernels, unregistering, re-registering ----------------------------------------


def test_a_registered_kernel_serves_its_device_and_sees_what_the_dispatcher_gives(
    route: Any,
    ns: str,
) -> None:
    seen: list[str] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        seen.append("fallback")
        return x * 2

    op = register_vmap_op(f, name=f"{ns}::f", fake_fn=torch.empty_like)

    def cpu_kernel(x: torch.Tensor) -> torch.Tensor:
        seen.append(f"cpu conj={x.is_conj()}")
        return torch.mul(x, 2)

    handle = op.register_kernel("cpu", cpu_kernel)
    x = torch.randn(3, dtype=torch.complex64, requires_grad=True)
    assert route(op, x)[0] == DIRECT  # a call autograd records
    with torch.no_grad():  # and any other call
        assert route(op, x)[0] == DIRECT
    # A conjugate view: the dispatcher resolves it before a kernel sees it.
    taken, out = route(op, x.conj())
    assert taken == DISPATCHER
    torch.testing.assert_close(out, x.detach().conj() * 2)
    assert seen == ["cpu conj=False"] * 3
    handle.remove()
    seen.clear()
    assert route(op, x)[0] == DIRECT
    assert route(op, x.conj())[0] == DIRECT  # the fallback serves every tensor again
    assert seen == ["fallback", "fallback"]


def test_a_kernel_for_another_device_type_leaves_the_fallback_direct(route: Any, ns: str) -> None:
    """With a kernel for CUDA only (a Triton op's usual case), a CPU tensor is served by the
    fallback, as with no kernel at all: same route, same results and gradients; a meta or a
    nested tensor still goes to the dispatcher (the fake; the nested tensor's own keys)."""
    seen: list[str] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        seen.append("fallback")
        return x * 2

    op = register_vmap_op(f, name=f"{ns}::f", fake_fn=torch.empty_like,
                          backward=lambda ctx, g: g * 2)  # fmt: skip
    handle = op.register_kernel("cuda", lambda x: x * 3)  # never runs on CPU tensors
    x = torch.randn(3, requires_grad=True)
    for context in (contextlib.nullcontext(), torch.no_grad()):
        with context:
            taken, out = route(op, x)
        assert taken == DIRECT
        torch.testing.assert_close(out, x.detach() * 2)
    (grad,) = torch.autograd.grad(op(x).sum(), x)
    torch.testing.assert_close(grad, torch.full_like(x, 2.0))
    assert route(op, x.detach().to("meta"))[0] == DISPATCHER
    nested = torch.nested.nested_tensor([torch.randn(2), torch.randn(3)])
    with pytest.raises(NotImplementedError):  # the dispatcher's error, on both routes
        op(nested)
    assert seen == ["fallback"] * 3
    handle.remove()
    assert route(op, x)[0] == DIRECT


@pytest.mark.parametrize("differentiable", [True, False])
def test_with_device_kernels_one_crossing_calls_go_to_the_dispatcher(
    route: Any, ns: str, differentiable: bool
) -> None:
    """Where the dispatcher reaches a device kernel in one crossing (a non-differentiable op,
    inference mode) the call goes to it at once; a differentiable op's call outside inference
    mode takes the direct route."""
    op = register_vmap_op(lambda x: x * 2, schema="(Tensor x) -> Tensor", name=f"{ns}::f",
                          fake_fn=torch.empty_like, differentiable=differentiable,
                          backward=(lambda ctx, g: g * 2) if differentiable else None)  # fmt: skip
    op.register_kernel("cpu", lambda x: x * 2)
    x = torch.randn(3, requires_grad=True)
    for context in (contextlib.nullcontext(), torch.no_grad()):
        with context:
            taken, out = route(op, x)
        assert taken == (DIRECT if differentiable else DISPATCHER)
        torch.testing.assert_close(out.detach(), x.detach() * 2)
    with torch.inference_mode():
        for t in (x, torch.randn(3)):  # a normal tensor, an inference tensor
            taken, out = route(op, t)
            assert taken == DISPATCHER
            torch.testing.assert_close(out, t.detach() * 2)


def test_unregister_and_re_register(route: Any, ns: str) -> None:
    op = register_vmap_op(lambda x: x * 2, schema="(Tensor x) -> Tensor", name=f"{ns}::f",
                          fake_fn=torch.empty_like)  # fmt: skip
    x = torch.randn(3)
    again = register_vmap_op(lambda x: x * 3, schema="(Tensor x) -> Tensor", name=f"{ns}::f",
                             fake_fn=torch.empty_like)  # fmt: skip
    for handle in (op, again):  # the old handle is the new op, on the direct route too
        taken, out = route(handle, x)
        assert taken == DIRECT
        torch.testing.assert_close(out, x * 3)
    unregister(f"{ns}::f")
    with pytest.raises(Exception):  # noqa: B017 (the dispatcher's own error)
        again(x)
    assert not again._state.device_kernels.serving


# -- non-differentiable ops, and the gradients' checks ----------------------------------------


def test_a_non_differentiable_op_takes_the_direct_route_below_autograd(route: Any, ns: str) -> None:
    op = register_vmap_op(_scale, name=f"{ns}::nd", differentiable=False,
                          fake_fn=lambda x, w, alpha, flag: torch.empty_like(x))  # fmt: skip
    args = _args()
    taken, out = route(op, *args)
    assert taken == DIRECT
    assert not out.requires_grad
    torch.testing.assert_close(out, op.overload(*args), rtol=0, atol=0)


def test_a_gradient_of_the_wrong_shape_names_the_argument(route: Any, ns: str) -> None:
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        return g, g.sum(0)[:2], None, None  # w's gradient cannot be summed to w's shape

    op = register_vmap_op(_scale, name=f"{ns}::bad", backward=backward,
                          setup_context=lambda ctx, inputs, output: None,
                          fake_fn=lambda x, w, alpha, flag: torch.empty_like(x))  # fmt: skip
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, requires_grad=True)
    assert route(op, x, w, 1.0, False)[0] == DIRECT
    with pytest.raises(RuntimeError, match=f"{ns}::bad.*argument 'w'"):
        op(x, w, 1.0, False).sum().backward()


def test_after_a_passing_backward_autograd_reports_a_wrong_shape(ns: str) -> None:
    """The direct route checks the gradients' shapes until one backward passed; a later wrong
    shape is still an error (autograd's), never a silent one."""

    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g if g.shape[0] == 2 else g[:1]

    op = register_vmap_op(lambda x: x * 1.0, schema="(Tensor x) -> Tensor", name=f"{ns}::b",
                          backward=backward, setup_context=lambda ctx, inputs, output: None,
                          fake_fn=torch.empty_like)  # fmt: skip
    op(torch.randn(2, 3, requires_grad=True)).sum().backward()
    with pytest.raises(RuntimeError, match="invalid gradient"):
        op(torch.randn(4, 3, requires_grad=True)).sum().backward()


def test_forwards_record_the_shapes_at_most_shape_records_times(ns: str) -> None:
    """Forwards without a backward stop recording the shapes after ``SHAPE_RECORDS`` calls;
    a wrong shape is then autograd's error, still an error, and the values stay right."""
    from opreg_core._autograd import DirectRecord

    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g[:1]

    op = register_vmap_op(lambda x: x * 2.0, schema="(Tensor x) -> Tensor", name=f"{ns}::r",
                          backward=backward, setup_context=lambda ctx, inputs, output: None,
                          fake_fn=torch.empty_like)  # fmt: skip
    x = torch.randn(4, 3, requires_grad=True)
    for _ in range(DirectRecord.SHAPE_RECORDS - 1):
        torch.testing.assert_close(op(x), x * 2.0)
    with pytest.raises(RuntimeError, match=f"opreg: {ns}::r: backward returned a gradient"):
        op(x).sum().backward()  # the last recording forward: opreg's check
    for _ in range(3):
        torch.testing.assert_close(op(x), x * 2.0)
    with pytest.raises(RuntimeError, match="invalid gradient"):
        op(x).sum().backward()


def test_the_aliasing_check_runs_before_the_forward_settles(ns: str) -> None:
    """The Function's forward calls the kernel itself only after a call of it has passed the
    aliasing check; an aliasing kernel fails on the direct route's first call."""
    op = register_vmap_op(lambda x: x.view(-1), schema="(Tensor x) -> Tensor", name=f"{ns}::al",
                          backward=lambda ctx, g: g.view(4, 3),
                          setup_context=lambda ctx, inputs, output: None,
                          fake_fn=lambda x: x.new_empty(x.numel()))  # fmt: skip
    x = torch.randn(4, 3, requires_grad=True)
    for _ in range(2):  # a failed first call does not settle the forward
        with pytest.raises(RuntimeError, match="aliases input 'x'"):
            op(x)


@pytest.mark.parametrize("call", ["op", "overload"])
def test_the_graph_node_calls_the_backward_without_a_trampoline(ns: str, call: str) -> None:
    """Autograd's engine calls ``apply`` on the node; opreg's node runs its backward there,
    not through ``BackwardCFunction.apply`` (two Python frames on every backward), on both
    routes, before and after the Function settles. Hooks on the node, anomaly mode and
    ``retain_graph`` see the node as before."""
    callers: list[str] = []

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(inputs[0])

    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        caller = sys._getframe(1)  # opreg's frames, then what called them
        while caller is not None and "opreg_core" in caller.f_code.co_filename:
            caller = caller.f_back
        callers.append("" if caller is None else caller.f_code.co_filename)
        return 2 * x * g

    op = register_vmap_op(lambda x: x * x, schema="(Tensor x) -> Tensor", name=f"{ns}::sq",
                          backward=backward, setup_context=setup,
                          fake_fn=torch.empty_like)  # fmt: skip
    fn = op if call == "op" else op.overload
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    seen: list[str] = []
    for _ in range(3):  # the recording backward, then the settled one
        seen.clear()
        out = fn(x)
        out.grad_fn.register_prehook(lambda grads: seen.append("pre"))
        out.grad_fn.register_hook(lambda grads_in, grads_out: seen.append("post"))
        with torch.autograd.detect_anomaly():
            (g,) = torch.autograd.grad(out.sum(), x, retain_graph=True)
        (g2,) = torch.autograd.grad(out.sum(), x)
        torch.testing.assert_close(g, 2 * x.detach(), rtol=0, atol=0)
        torch.testing.assert_close(g2, g, rtol=0, atol=0)
        assert seen == ["pre", "post", "pre", "post"]
    assert not any("torch/autograd/function.py" in f for f in callers), callers


def test_double_backward_is_the_dispatchers(ns: str) -> None:
    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(inputs[0])

    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return 3 * x * x * g

    op = register_vmap_op(lambda x: x**3, schema="(Tensor x) -> Tensor", name=f"{ns}::cube",
                          backward=backward, setup_context=setup,
                          fake_fn=torch.empty_like)  # fmt: skip
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    results = []
    for call in (op, op.overload):
        (g,) = torch.autograd.grad(call(x).sum(), x, create_graph=True)
        (gg,) = torch.autograd.grad(g.sum(), x)
        results.append((g.detach(), gg))
    torch.testing.assert_close(results[0], results[1], rtol=0, atol=0)
    torch.testing.assert_close(results[0][1], 6 * x.detach())


def test_ops_the_plan_does_not_cover_keep_the_entry_point(ns: str) -> None:
    def split(x: torch.Tensor) -> list[torch.Tensor]:
        return [x * 1, x * 2]

    op = register_vmap_op(split, name=f"{ns}::split",
                          fake_fn=lambda x: [torch.empty_like(x), torch.empty_like(x)])  # fmt: skip
    assert op._state.call is op.overload._op
    written_list = register_vmap_op(
        lambda xs, y: None, schema="(Tensor(a!)[] xs, Tensor y) -> ()", name=f"{ns}::list_written",
        mutates_args=("xs",), fake_fn=lambda xs, y: None,
    )  # fmt: skip
    assert written_list._state.call is written_list.overload._op
    optional = register_vmap_op(
        lambda x, y: None, schema="(Tensor x, Tensor(a!)? y) -> ()", name=f"{ns}::opt_written",
        mutates_args=("y",), fake_fn=lambda x, y: None,
    )  # fmt: skip
    assert optional._state.call is optional.overload._op


# -- list arguments ----------------------------------------------------------------------------


def _blend(xs: list[torch.Tensor], w: torch.Tensor, alpha: float) -> torch.Tensor:
    out = w * 0
    for i, x in enumerate(xs):
        if x is not None:  # (a ``Tensor?[]`` may hold None)
            out = out + x * w * (alpha + i)
    return out


def _blend_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    xs, w, alpha = inputs
    assert type(xs) is list  # the declared arguments, a list as through the dispatcher
    ctx.save_for_backward(w, *xs)
    ctx.alpha = alpha
    ctx.seen_needs = [tuple(ctx.needs_input_grad)]


def _blend_backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
    w, *xs = ctx.saved_tensors
    ctx.seen_needs.append(tuple(ctx.needs_input_grad))
    gxs = [g * w * (ctx.alpha + i) for i in range(len(xs))]
    gw = sum((g * x * (ctx.alpha + i) for i, x in enumerate(xs)), torch.zeros_like(w))
    return gxs, gw, None


@pytest.fixture(params=["fallback", "cpu_kernel", "optional_list"])
def blend(request: pytest.FixtureRequest, ns: str) -> Any:
    """``Tensor[] xs`` (or ``Tensor?[]``), a tensor and a scalar, with a backward returning a
    list of gradients for the list."""
    kind = "Tensor?[]" if request.param == "optional_list" else "Tensor[]"
    op = register_vmap_op(
        _blend,
        schema=f"({kind} xs, Tensor w, float alpha) -> Tensor",
        name=f"{ns}::blend",
        fake_fn=lambda xs, w, alpha: torch.empty_like(w),
        backward=_blend_backward,
        setup_context=_blend_setup,
    )
    if request.param == "cpu_kernel":
        op.register_kernel("cpu", _blend)
    return op


def _blend_grads(call: Any, xs: list[torch.Tensor], w: torch.Tensor) -> tuple[Any, ...]:
    out = call(xs, w, 0.5)
    wanted = [t for t in (*xs, w) if t.requires_grad]
    return out, torch.autograd.grad(out.sum(), wanted), out.grad_fn


@pytest.mark.parametrize("needing", ["all", "second element", "w only"])
def test_list_arguments_take_the_direct_route_with_the_dispatchers_results(
    route: Any, blend: Any, needing: str
) -> None:
    """Recorded calls: each element of a list is an input autograd sees; ``setup_context`` and
    the backward get the list, and one ``needs_input_grad`` flag per declared argument (the
    list's: whether any element needs a gradient), as through the dispatcher."""
    xs = [torch.randn(3, 4, dtype=torch.float64) for _ in range(3)]
    w = torch.randn(3, 4, dtype=torch.float64)
    if needing in ("all", "second element"):
        xs[1].requires_grad_()
    if needing == "all":
        xs[0].requires_grad_()
    if needing != "second element":
        w.requires_grad_()
    taken, _ = route(blend, xs, w, 0.5)
    assert taken == DIRECT
    direct, through_ops = _blend_grads(blend, xs, w), _blend_grads(blend.overload, xs, w)
    torch.testing.assert_close(direct[0], through_ops[0], rtol=0, atol=0)
    torch.testing.assert_close(direct[1], through_ops[1], rtol=0, atol=0)
    assert direct[2].name() == through_ops[2].name()
    needs = direct[2].seen_needs
    assert needs == through_ops[2].seen_needs
    assert needs[0] == needs[1] == (needing != "w only", needing != "second element", False)
    assert (xs[0].grad, xs[2].grad) == (None, None)


def test_list_arguments_without_grad_run_the_kernel_alone(
    route: Any, blend: Any, request: pytest.FixtureRequest
) -> None:
    """Not recorded: the kernel alone, an empty list too. In inference mode, an op with a
    device kernel goes to the dispatcher, which reaches it in one crossing there."""
    xs = [torch.randn(3, 4) for _ in range(2)]
    w = torch.randn(3, 4)
    for args in ((xs, w, 0.5), ([], w, 0.5)):
        taken, out = route(blend, *args)
        assert taken == DIRECT
        torch.testing.assert_close(out, blend.overload(*args), rtol=0, atol=0)
    with torch.inference_mode():
        taken, out = route(blend, xs, w, 2.0)
    device_kernel = request.node.callspec.params["blend"] == "cpu_kernel"
    assert taken == (DISPATCHER if device_kernel else DIRECT)
    torch.testing.assert_close(out, _blend(xs, w, 2.0), rtol=0, atol=0)


@pytest.mark.parametrize("kernel", ["fallback", "cpu_kernel"])
def test_a_kernel_changing_its_list_changes_nothing_the_caller_holds(
    route: Any, ns: str, kernel: str
) -> None:
    """The dispatcher hands a kernel and ``setup_context`` lists of their own: a kernel that
    pops from its list leaves the caller's list, and the list ``setup_context`` sees, whole,
    and ``setup_context`` popping from its list leaves the caller's whole. So does the direct
    route: recorded, after the Function settled, and not recorded."""
    seen: list[int] = []

    def head(xs: list[torch.Tensor], w: torch.Tensor) -> torch.Tensor:
        return xs.pop(0) * w

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        seen.append(len(inputs[0]))
        inputs[0].pop()  # its own list too
        ctx.save_for_backward(inputs[1])

    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        (w,) = ctx.saved_tensors
        return [g * w, None], None

    op = register_vmap_op(head, name=f"{ns}::head", backward=backward, setup_context=setup,
                          fake_fn=lambda xs, w: torch.empty_like(w))  # fmt: skip
    if kernel == "cpu_kernel":
        op.register_kernel("cpu", head)
    w = torch.randn(3)
    for grad in (True, True, False):  # the second recorded call: the Function has settled
        xs = [torch.randn(3, requires_grad=grad), torch.randn(3)]
        taken, out = route(op, xs, w)
        assert taken == DIRECT
        assert len(xs) == 2
        torch.testing.assert_close(out, xs[0].detach() * w, rtol=0, atol=0)
        if grad:
            assert seen.pop() == 2
            out.sum().backward()
    assert not seen


def test_a_keyword_only_list_is_the_kernels_own(route: Any, ns: str) -> None:
    def head(x: torch.Tensor, *, ys: list[torch.Tensor]) -> torch.Tensor:
        return x * ys.pop(0)

    op = register_vmap_op(head, name=f"{ns}::kw_head",
                          fake_fn=lambda x, *, ys: torch.empty_like(x))  # fmt: skip
    x, ys = torch.randn(3), [torch.randn(3), torch.randn(3)]
    for grad in (False, True):
        x.requires_grad_(grad)
        taken, out = route(op, x, ys=ys)
        assert taken == DIRECT and len(ys) == 2
        torch.testing.assert_close(out, x * ys[0], rtol=0, atol=0)


def test_lists_of_many_lengths(route: Any, blend: Any) -> None:
    """Past the lengths whose positions an op keeps, calls still take the direct route with
    the dispatcher's values."""
    w = torch.randn(2, dtype=torch.float64)
    for n in range(70):
        xs = [torch.full((2,), float(i), dtype=torch.float64) for i in range(n)]
        taken, out = route(blend, xs, w, 0.5)
        assert taken == DIRECT
        torch.testing.assert_close(out, blend.overload(xs, w, 0.5), rtol=0, atol=0)


def test_list_arguments_the_dispatcher_routes_differently(
    route: Any, blend: Any, dispatcher_entries: Any
) -> None:
    """A tuple for the list (the dispatcher converts it), a subclass or a meta tensor in it, and
    None in a ``Tensor[]`` (the dispatcher's error) go to the dispatcher."""
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(3, 4)
    taken, out = route(blend, (x, x), w, 0.5)
    assert taken == DISPATCHER
    torch.testing.assert_close(out, blend([x, x], w, 0.5), rtol=0, atol=0)
    assert route(blend, [x, x.detach().as_subclass(_Logged)], w, 0.5)[0] == DISPATCHER
    taken, out = route(blend, [x.to("meta")], w.to("meta"), 0.5)
    assert taken == DISPATCHER and out.device.type == "meta"
    optional = "Tensor?[]" in str(blend.overload._schema)
    if optional:  # None is an element like any other there
        taken, out = route(blend, [x, None], w, 0.5)
        assert taken == DIRECT
        torch.testing.assert_close(out, blend.overload([x, None], w, 0.5), rtol=0, atol=0)
    else:
        with pytest.raises(Exception) as through_ops:
            blend.overload([x, None], w, 0.5)
        with dispatcher_entries(blend) as count, pytest.raises(type(through_ops.value)) as direct:
            blend([x, None], w, 0.5)
        assert count == [1]
        assert str(direct.value) == str(through_ops.value)


def test_a_call_holding_no_tensor_goes_to_the_dispatcher(route: Any, ns: str) -> None:
    """With only list arguments, empty lists give the dispatcher no tensor to pick a kernel
    by: the call is the dispatcher's, whatever it does with it."""

    def total(xs: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack(xs).sum(0) if xs else torch.zeros(())

    def fake(xs: list[torch.Tensor]) -> torch.Tensor:
        return torch.empty_like(xs[0]) if xs else torch.empty(())

    op = register_vmap_op(total, name=f"{ns}::total", fake_fn=fake)
    x = torch.randn(3, requires_grad=True)
    taken, out = route(op, [x, x])
    assert taken == DIRECT and out.requires_grad
    taken, out = route(op, [])
    assert taken == DISPATCHER
    torch.testing.assert_close(out, op.overload([]), rtol=0, atol=0)


def test_a_wrong_gradient_for_a_list_element_names_the_element(route: Any, ns: str) -> None:
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        return [g, g.sum(0)], None  # the second element's gradient has the wrong shape

    op = register_vmap_op(
        lambda xs, w: xs[0] + xs[1] + w, schema="(Tensor[] xs, Tensor w) -> Tensor",
        name=f"{ns}::pair", fake_fn=lambda xs, w: torch.empty_like(w), backward=backward,
    )  # fmt: skip
    xs = [torch.randn(3, 4, requires_grad=True) for _ in range(2)]
    w = torch.randn(3, 4)
    assert route(op, xs, w)[0] == DIRECT
    for call in (op, op.overload):
        with pytest.raises(RuntimeError, match=rf"{op.qualname}.*argument 'xs\[1\]' of shape"):
            call(xs, w).sum().backward()


def test_a_mutating_op_with_a_list_argument(route: Any, ns: str) -> None:
    """The written tensor is bumped, the list's elements are not; a subclass in the list sends
    the call of an op with a device kernel to the dispatcher."""

    def add_all(out: torch.Tensor, xs: list[torch.Tensor]) -> None:
        for x in xs:
            out.add_(x)

    op = register_vmap_op(add_all, name=f"{ns}::add_all", mutates_args=("out",),
                          fake_fn=lambda out, xs: None)  # fmt: skip
    out, xs = torch.zeros(3), [torch.ones(3), torch.ones(3)]
    before = _versions(out, *xs)
    assert route(op, out, xs)[0] == DIRECT
    assert [a - b for a, b in zip(_versions(out, *xs), before, strict=True)] == [1, 0, 0]
    torch.testing.assert_close(out, torch.full((3,), 2.0))
    op.register_kernel("cpu", add_all)
    with torch.no_grad():
        assert route(op, out, xs)[0] == DIRECT
        assert route(op, out, [xs[0].as_subclass(_Logged)])[0] == DISPATCHER
    torch.testing.assert_close(out, torch.full((3,), 5.0))


# -- mutating ops ------------------------------------------------------------------------------


def _add_into(out: torch.Tensor, x: torch.Tensor, alpha: float) -> None:
    out.add_(x, alpha=alpha)


@pytest.fixture(params=["fallback", "cpu_kernel", "non_differentiable"])
def add_into(request: pytest.FixtureRequest, ns: str) -> Any:
    op = register_vmap_op(_add_into, name=f"{ns}::add_into", mutates_args=("out",),
                          fake_fn=lambda out, x, alpha: None,
                          differentiable=request.param != "non_differentiable")  # fmt: skip
    if request.param == "cpu_kernel":
        op.register_kernel("cpu", _add_into)
    return op


def _versions(*tensors: torch.Tensor) -> list[int]:
    return [t._version for t in tensors]


def test_a_mutating_op_takes_the_direct_route_and_bumps_as_the_dispatcher(
    route: Any, add_into: Any
) -> None:
    """An unrecorded call writes, and bumps the written tensor's version (not the others'),
    exactly as the call through ``torch.ops`` does; a tensor saved for a backward and then
    written is caught by autograd."""
    out, x = torch.zeros(3), torch.ones(3)
    results = []
    for call in ("direct", "ops"):
        before = _versions(out, x)
        if call == "direct":
            taken, value = route(add_into, out, x, 2.0)
            assert taken == DIRECT
        else:
            value = add_into.overload(out, x, 2.0)
        assert value is None
        results.append([a - b for a, b in zip(_versions(out, x), before, strict=True)])
    assert results == [[1, 0], [1, 0]]
    torch.testing.assert_close(out, torch.full((3,), 4.0))
    a = torch.ones(3, requires_grad=True)
    saved = a * 1.0  # not a leaf; its square saves it
    y = saved * saved
    with torch.no_grad():
        assert route(add_into, saved, x, 1.0)[0] == DIRECT
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_a_write_autograd_would_record_goes_to_the_dispatcher(route: Any, add_into: Any) -> None:
    out = torch.zeros(3, requires_grad=True).clone()
    x = torch.ones(3)
    assert route(add_into, out, x, 1.0)[0] == DISPATCHER
    with torch.no_grad():
        assert route(add_into, out, x, 1.0)[0] == DIRECT


def test_inference_tensors_and_below_a_version_bump_go_to_the_dispatcher(
    route: Any, add_into: Any
) -> None:
    from opreg_core._private import AutoDispatchBelowADInplaceOrView

    with torch.inference_mode():
        frozen = torch.zeros(3)
    # With one kernel for every device type, an inference tensor goes to the dispatcher; with
    # a device kernel the call enters the dispatcher below the op's ADInplaceOrView key (the
    # spy counts the entry from the top only), which has nothing to bump either.
    everywhere = add_into._state.device_kernels.everywhere is not None
    assert route(add_into, frozen, torch.ones(3), 1.0)[0] == (DISPATCHER if everywhere else DIRECT)
    torch.testing.assert_close(frozen, torch.ones(3))
    out, x = torch.zeros(3), torch.ones(3)
    # A normal tensor written in inference mode is bumped, on the direct route where the
    # fallback serves every device type (with a device kernel, the dispatcher's at once).
    expected = DIRECT if everywhere else DISPATCHER
    with torch.inference_mode():
        before = out._version
        assert route(add_into, out, x, 1.0)[0] == expected
        assert out._version == before + 1
    with AutoDispatchBelowADInplaceOrView():
        before = out._version
        assert route(add_into, out, torch.ones(3), 1.0)[0] == DISPATCHER
        assert out._version == before  # the dispatcher bumps nothing there


def test_a_mutating_op_with_a_device_kernel_crosses_into_python_once(ns: str) -> None:
    """With a device kernel, an unrecorded write enters the dispatcher below the op's
    ADInplaceOrView kernel: that Python kernel never runs, the device kernel runs once, and
    results, versions and errors are those of the call through ``torch.ops`` for strided,
    inference, meta, conjugate-view and ``Buffer`` tensors."""
    import opreg_core._build as build

    crossings: list[str] = []
    made = build.make_mutation_kernel

    def counted(overload: Any, signature: Any) -> Any:
        inner = made(overload, signature)

        def spy(*args: Any, **kwargs: Any) -> Any:
            crossings.append("ADInplaceOrView")
            return inner(*args, **kwargs)

        return spy

    def kernel(out: torch.Tensor, x: torch.Tensor, alpha: float) -> None:
        crossings.append("kernel")
        out.add_(x, alpha=alpha)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(build, "make_mutation_kernel", counted)
        op = register_vmap_op(_add_into, name=f"{ns}::once", mutates_args=("out",),
                              fake_fn=lambda out, x, alpha: None)  # fmt: skip
    op.register_kernel("cpu", kernel)
    with torch.no_grad():
        out = torch.zeros(3)
        before = out._version
        op(out, torch.ones(3), 2.0)
        assert crossings == ["kernel"] and out._version == before + 1
        torch.testing.assert_close(out, torch.full((3,), 2.0))
        crossings.clear()
        op.overload(out, torch.ones(3), 1.0)  # from the top: both kernels
        assert crossings == ["ADInplaceOrView", "kernel"]

    def cases() -> list[tuple[torch.Tensor, torch.Tensor]]:
        with torch.inference_mode():
            frozen = torch.zeros(3)
        return [
            (torch.zeros(4, 3).t(), torch.ones(3, 4)),
            (frozen, torch.ones(3)),
            (torch.zeros(3, device="meta"), torch.ones(3, device="meta")),
            (torch.zeros(3, dtype=torch.complex64).conj(), torch.ones(3, dtype=torch.complex64)),
            (torch.nn.Buffer(torch.zeros(3)), torch.ones(3)),
        ]

    for (a1, x1), (a2, x2) in zip(cases(), cases(), strict=True):
        outcomes = []
        for call, target, x in ((op, a1, x1), (op.overload, a2, x2)):
            before = -1 if target.is_inference() else target._version
            crossings.clear()
            try:
                call(target, x, 1.5)
                if call is op:  # whatever the tensor, never through the Python bump kernel
                    assert "ADInplaceOrView" not in crossings, (target, crossings)
                after = -1 if target.is_inference() else target._version
                outcomes.append(("ok", str(after - before)))
            except Exception as exc:  # the dispatcher's error, on both routes
                outcomes.append((type(exc).__name__, str(exc)))
        assert outcomes[0] == outcomes[1], outcomes
        if a1.device.type != "meta" and outcomes[0][0] == "ok":
            torch.testing.assert_close(a1.resolve_conj(), a2.resolve_conj())


@pytest.mark.parametrize("device_kernel", [False, True], ids=["fallback", "cpu_kernel"])
def test_none_for_a_required_tensor_gets_the_dispatchers_error(
    dispatcher_entries: Any, scale: Any, device_kernel: bool
) -> None:
    """Only an optional tensor may be None on the direct route; None for a required one goes
    to the dispatcher, with or without a device kernel, and fails as it fails there."""
    if device_kernel:
        scale.register_kernel("cpu", _scale)
    _, w, alpha, flag = _args()
    with pytest.raises(Exception) as through_ops:
        scale.overload(None, w, alpha, flag)
    with dispatcher_entries(scale) as count, pytest.raises(type(through_ops.value)) as direct:
        scale(None, w, alpha, flag)
    assert count == [1]
    assert str(direct.value) == str(through_ops.value)


def test_plain_keys_learnt_in_inference_mode_are_a_normal_tensors(route: Any, ns: str) -> None:
    """An op with a device kernel: a call in inference mode goes to the dispatcher and learns
    no key set; a key set learnt while inference mode is on is a normal tensor's (not an
    inference tensor's), so later calls, which read the tensors' key sets, still take the
    direct route. (A differentiable op: a mutating one's write reads no key set.)"""
    from opreg_core._call_path import plain
    from opreg_core._private import dispatch_keys_raw

    op = register_vmap_op(lambda x: x * 2, schema="(Tensor x) -> Tensor", name=f"{ns}::learnt",
                          fake_fn=torch.empty_like, backward=lambda ctx, g: g * 2)  # fmt: skip
    op.register_kernel("cpu", lambda x: x * 2)
    saved = dict(plain.PLAIN_KEYS)
    plain.PLAIN_KEYS.clear()
    try:
        x = torch.ones(3)
        with torch.inference_mode():
            assert route(op, x)[0] == DISPATCHER
            assert not plain.PLAIN_KEYS
            assert plain.plain_device_type(x, dispatch_keys_raw(x)) == "cpu"
        taken, out = route(op, x)
        assert taken == DIRECT
        torch.testing.assert_close(out, torch.full((3,), 2.0))
        assert {dispatch_keys_raw(x): "cpu"} == plain.PLAIN_KEYS
    finally:
        plain.PLAIN_KEYS.clear()
        plain.PLAIN_KEYS.update(saved)


# -- keyword-only arguments --------------------------------------------------------------------


def _affine(x: torch.Tensor, *, w: torch.Tensor, k: float = 2.0) -> torch.Tensor:
    return x * w * k


def _affine_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, w, k = inputs  # every argument, in declaration order, as through the dispatcher
    ctx.save_for_backward(x, w)
    ctx.k = k


def _affine_backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
    x, w = ctx.saved_tensors
    return g * w * ctx.k, (g * x * ctx.k).sum(0), None


@pytest.fixture(params=["fallback", "cpu_kernel"])
def affine(request: pytest.FixtureRequest, ns: str) -> Any:
    op = register_vmap_op(_affine, name=f"{ns}::affine", backward=_affine_backward,
                          setup_context=_affine_setup,
                          fake_fn=lambda x, *, w, k=2.0: torch.empty_like(x))  # fmt: skip
    if request.param == "cpu_kernel":
        op.register_kernel("cpu", _affine)
    return op


def test_keyword_only_arguments_given_by_name_take_the_direct_route(
    route: Any, affine: Any
) -> None:
    """Recorded, with the dispatcher's values and gradients (the Function gets every argument
    in declaration order, the kernel the keyword-only ones by name); not recorded, the direct
    route too, the kernel getting the keyword-only ones by name."""
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, requires_grad=True)
    taken, out = route(affine, x, w=w, k=3.0)
    assert taken == DIRECT and out.requires_grad
    out.sum().backward()
    gx, gw = x.grad, w.grad
    x.grad = w.grad = None
    expected = affine.overload(x, w=w, k=3.0)
    expected.sum().backward()
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    torch.testing.assert_close(gx, x.grad, rtol=0, atol=0)
    torch.testing.assert_close(gw, w.grad, rtol=0, atol=0)
    again = affine(x, w=w, k=3.0)  # the Function made for the kernel is made once
    assert type(again.grad_fn) is type(out.grad_fn)
    plain = x.detach()
    taken, out = route(affine, plain, w=w.detach(), k=3.0)
    assert taken == DIRECT
    torch.testing.assert_close(out, plain * w.detach() * 3.0, rtol=0, atol=0)
    assert not out.requires_grad


def test_keyword_defaults_misspellings_and_positional_names_go_to_the_dispatcher(
    route: Any, affine: Any
) -> None:
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4)
    taken, out = route(affine, x, w=w)  # k left to its default: the dispatcher fills it
    assert taken == DISPATCHER
    torch.testing.assert_close(out, x * w * 2.0)
    assert route(affine, x=x, w=w, k=3.0)[0] == DISPATCHER
    with pytest.raises(Exception) as through_ops:
        affine.overload(x, w=w, kk=3.0)
    with pytest.raises(type(through_ops.value)) as direct:
        affine(x, w=w, kk=3.0)
    assert str(direct.value) == str(through_ops.value)


def test_a_keyword_only_written_tensor(route: Any, ns: str) -> None:
    def add_into(x: torch.Tensor, *, out: torch.Tensor) -> None:
        out.add_(x)

    op = register_vmap_op(add_into, name=f"{ns}::kw_into", mutates_args=("out",),
                          fake_fn=lambda x, *, out: None)  # fmt: skip
    x, out = torch.ones(3), torch.zeros(3)
    before = out._version
    assert route(op, x, out=out)[0] == DIRECT
    assert out._version == before + 1
    torch.testing.assert_close(out, torch.ones(3))


def test_a_list_with_keyword_only_arguments(route: Any, ns: str) -> None:
    """The Function gets the list's elements after every declared argument (the keyword-only
    ones included); ``setup_context`` sees the declared ones, the list a list."""

    def f(xs: list[torch.Tensor], *, w: torch.Tensor, k: float = 2.0) -> torch.Tensor:
        return (xs[0] + xs[1]) * w * k

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        xs, w, k = inputs
        assert type(xs) is list
        ctx.save_for_backward(w, *xs)
        ctx.k = k

    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        w, a, b = ctx.saved_tensors
        return [g * w * ctx.k, g * w * ctx.k], g * (a + b) * ctx.k, None

    op = register_vmap_op(f, name=f"{ns}::list_kw", backward=backward, setup_context=setup,
                          fake_fn=lambda xs, *, w, k=2.0: torch.empty_like(w))  # fmt: skip
    xs = [torch.randn(3, requires_grad=True) for _ in range(2)]
    w = torch.randn(3, requires_grad=True)
    taken, out = route(op, xs, w=w, k=3.0)
    assert taken == DIRECT
    expected = op.overload(xs, w=w, k=3.0)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    grads = torch.autograd.grad(out.sum(), [*xs, w])
    torch.testing.assert_close(grads, torch.autograd.grad(expected.sum(), [*xs, w]), rtol=0, atol=0)
    assert route(op, xs, w=w)[0] == DISPATCHER  # k left to its default
