"""differentiable=False: each call decides whether its kernel runs below autograd.

A non-differentiable op's ``Autograd`` key is a fallthrough; its kernels enter
``_AutoDispatchBelowAutograd`` only where autograd could act (an input requires grad with grad
mode on, or a forward-AD dual level is open), checked in one C call for most schemas and
argument by argument where a list of tensors may hold a None (``Tensor?[]``). These tests pass
the input that requires grad through every kind of argument and every way of calling, and
watch inside the fallback whether autograd recorded anything (a leak) as well as the output.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.func import functionalize, grad, jvp, vmap

from opreg_core import register_vmap_op

#: What each fallback saw inside: whether a torch call on its inputs recorded a graph.
Seen = list[bool]


def _recorded(*tensors: torch.Tensor | None) -> bool:
    """Whether a differentiable torch call on ``tensors`` records autograd history here."""
    return any((t * 1.0).requires_grad for t in tensors if t is not None)


def _empty(x: torch.Tensor, *_: Any, **__: Any) -> torch.Tensor:
    return torch.empty_like(x)


def _make(ns: str, name: str, schema: str, fn: Callable[..., Any], fake: Callable[..., Any]) -> Any:
    return register_vmap_op(
        fn, name=f"{ns}::{name}", schema=schema, fake_fn=fake, differentiable=False
    )


def _pair(ns: str, seen: Seen) -> Any:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        seen.append(_recorded(x, y))
        return x.sin() * y

    return _make(ns, "pair", "(Tensor x, Tensor y) -> Tensor", f, _empty)


def _optional(ns: str, seen: Seen) -> Any:
    def f(x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        seen.append(_recorded(x, y))
        return x.sin() if y is None else x.sin() * y

    return _make(ns, "optional", "(Tensor x, Tensor? y=None) -> Tensor", f, _empty)


def _list(ns: str, seen: Seen) -> Any:
    def f(xs: list[torch.Tensor]) -> torch.Tensor:
        seen.append(_recorded(*xs))
        return xs[0].sin() * xs[1]

    return _make(ns, "tensors", "(Tensor[] xs) -> Tensor", f, lambda xs: torch.empty_like(xs[0]))


def _optional_list(ns: str, seen: Seen) -> Any:
    def f(x: torch.Tensor, ys: list[torch.Tensor | None]) -> torch.Tensor:
        seen.append(_recorded(x, *ys))
        out = x.sin()
        for y in ys:
            if y is not None:
                out = out * y
        return out

    return _make(ns, "optionals", "(Tensor x, Tensor?[] ys) -> Tensor", f, _empty)


def _keyword(ns: str, seen: Seen) -> Any:
    def f(x: torch.Tensor, *, w: torch.Tensor, k: float = 1.0) -> torch.Tensor:
        seen.append(_recorded(x, w))
        return x.sin() * w * k

    return _make(ns, "keyword", "(Tensor x, *, Tensor w, float k=1.0) -> Tensor", f, _empty)


def _keyword_list(ns: str, seen: Seen) -> Any:
    def f(x: torch.Tensor, *, ws: list[torch.Tensor]) -> torch.Tensor:
        seen.append(_recorded(x, *ws))
        return x.sin() * ws[0]

    return _make(ns, "keyword_list", "(Tensor x, *, Tensor[] ws) -> Tensor", f, _empty)


def _r(requires_grad: bool = False) -> torch.Tensor:
    return torch.randn(2, 3, dtype=torch.float64, requires_grad=requires_grad)


#: (name, op factory, call(op, a tensor requiring grad or not, a plain one), expected value)
CASES: list[tuple[str, Callable[[str, Seen], Any], Callable[..., Any], Callable[..., Any]]] = [
    ("first", _pair, lambda op, g, p: op(g, p), lambda g, p: g.sin() * p),
    ("second", _pair, lambda op, g, p: op(p, g), lambda g, p: p.sin() * g),
    ("by keyword", _pair, lambda op, g, p: op(x=p, y=g), lambda g, p: p.sin() * g),
    ("optional", _optional, lambda op, g, p: op(p, g), lambda g, p: p.sin() * g),
    ("optional omitted", _optional, lambda op, g, p: op(g), lambda g, p: g.sin()),
    ("list", _list, lambda op, g, p: op([p, g]), lambda g, p: p.sin() * g),
    (
        "optional list, None first",
        _optional_list,
        lambda op, g, p: op(p, [None, g]),
        lambda g, p: p.sin() * g,
    ),
    (
        "optional list, tuple",
        _optional_list,
        lambda op, g, p: op(p, (g,)),
        lambda g, p: p.sin() * g,
    ),
    ("keyword-only", _keyword, lambda op, g, p: op(p, w=g), lambda g, p: p.sin() * g),
    ("keyword-only, k", _keyword, lambda op, g, p: op(p, w=g, k=2.0), lambda g, p: p.sin() * g * 2),
    ("keyword-only list", _keyword_list, lambda op, g, p: op(p, ws=[g]), lambda g, p: p.sin() * g),
]
IDS = [c[0] for c in CASES]


@pytest.mark.parametrize(("label", "factory", "call", "expected"), CASES, ids=IDS)
def test_input_requiring_grad_runs_below_autograd(
    ns: str, label: str, factory: Any, call: Any, expected: Any
) -> None:
    """Whichever argument holds the tensor that requires grad, the fallback records nothing
    and the output is a constant to autograd; the value is the fallback's."""
    seen: Seen = []
    op = factory(ns, seen)
    g, p = _r(True), _r()
    out = call(op, g, p)
    assert seen == [False]
    assert not out.requires_grad and out.grad_fn is None
    torch.testing.assert_close(out, expected(g.detach(), p))
    # a gradient that flows around the op still reaches the input
    (g * call(op, g, p).detach()).sum().backward()
    assert g.grad is not None
    # without any input requiring grad the value is the same
    torch.testing.assert_close(call(op, g.detach(), p), expected(g.detach(), p))


@pytest.mark.parametrize(("label", "factory", "call", "expected"), CASES, ids=IDS)
def test_grad_modes(ns: str, label: str, factory: Any, call: Any, expected: Any) -> None:
    """no_grad, inference_mode and enable_grad inside no_grad: never a graph, same values."""
    seen: Seen = []
    op = factory(ns, seen)
    g, p = _r(True), _r()
    with torch.no_grad():
        out = call(op, g, p)
        with torch.enable_grad():
            again = call(op, g, p)
    with torch.inference_mode():
        inf = call(op, g.detach(), p)
    assert seen == [False, False, False]
    assert not out.requires_grad and not again.requires_grad
    assert inf.is_inference()
    for value in (out, again, inf):
        torch.testing.assert_close(value, expected(g.detach(), p))


@pytest.mark.parametrize(("label", "factory", "call", "expected"), CASES, ids=IDS)
def test_forward_ad_leaks_no_tangent(
    ns: str, label: str, factory: Any, call: Any, expected: Any
) -> None:
    """A dual tensor through any kind of argument: the fallback runs below autograd inside the
    dual level, and the output has no tangent."""
    seen: Seen = []
    op = factory(ns, seen)
    p = _r()
    with fwAD.dual_level():
        dual = fwAD.make_dual(_r(), _r())
        out = call(op, dual, p)
        assert fwAD.unpack_dual(out).tangent is None
        torch.testing.assert_close(out, expected(fwAD.unpack_dual(dual).primal, p))


@pytest.mark.parametrize("case", [0, 1, 8], ids=[IDS[0], IDS[1], IDS[8]])
def test_transforms(ns: str, case: int) -> None:
    """torch.func.grad and jvp see a constant, vmap over an input requiring grad gives no
    graph, torch.compile keeps it so and functionalize gives the same values."""
    _, factory, call, expected = CASES[case]
    seen: Seen = []
    op = factory(ns, seen)
    x, p = _r(), _r()
    g = grad(lambda t: (t * call(op, t, p)).sum())(x)
    torch.testing.assert_close(g, expected(x, p))  # the op's own term is zero
    _, tangent = jvp(lambda t: call(op, t, p), (x,), (torch.ones_like(x),))
    torch.testing.assert_close(tangent, torch.zeros_like(x))
    batched = vmap(lambda t: call(op, t, p))(_r(True))
    assert not batched.requires_grad
    compiled = torch.compile(lambda t: call(op, t, p), backend="aot_eager", fullgraph=True)
    out = compiled(x.requires_grad_())
    assert not out.requires_grad
    torch.testing.assert_close(out, expected(x.detach(), p))
    torch.testing.assert_close(functionalize(lambda t: call(op, t, p))(x.detach()), out)
    assert True not in seen


class _Logged(torch.Tensor):
    """A subclass with ``__torch_function__`` only: the kernel receives it as it is."""

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return super().__torch_function__(func, types, args, kwargs or {})


def test_tensor_subclass_and_fake_tensor(ns: str) -> None:
    seen: Seen = []
    op = _pair(ns, seen)
    p = _r()
    sub = _r().as_subclass(_Logged).requires_grad_()
    out = op(p, sub)
    assert seen == [False]
    assert not out.requires_grad
    expected = (p.sin() * sub.detach()).as_subclass(torch.Tensor)
    torch.testing.assert_close(out.as_subclass(torch.Tensor), expected)
    with FakeTensorMode() as mode:
        fx = mode.from_tensor(_r(True))
        fake = op(fx, mode.from_tensor(p))
    assert fake.shape == (2, 3) and not fake.requires_grad
    assert seen == [False]  # the fake ran, not the fallback


def test_no_tensor_argument(ns: str) -> None:
    """An op taking no tensor (random ops): inside a dual level it runs below autograd too (a
    dual tensor the fallback reads from elsewhere gives it no tangent)."""
    seen: list[bool] = []
    held: dict[str, torch.Tensor] = {}

    def ramp(n: int, scale: float) -> torch.Tensor:
        out = torch.arange(n, dtype=torch.float64) * scale
        if "dual" in held:
            out = out * held["dual"]
            seen.append(fwAD.unpack_dual(out).tangent is not None)
        return out

    op = register_vmap_op(
        ramp,
        name=f"{ns}::ramp",
        schema="(int n, float scale) -> Tensor",
        fake_fn=lambda n, scale: torch.empty(n, dtype=torch.float64),
        differentiable=False,
    )
    torch.testing.assert_close(op(3, 2.0), torch.tensor([0.0, 2.0, 4.0], dtype=torch.float64))
    with fwAD.dual_level():
        one = torch.ones(3, dtype=torch.float64)
        held["dual"] = fwAD.make_dual(one, one.clone())
        out = op(3, 2.0)
    assert seen == [False]
    assert fwAD.unpack_dual(out).tangent is None


@pytest.mark.parametrize("keyword", [False, True], ids=["positional", "keyword-only"])
def test_first_call_check_holds_until_a_call_passes(ns: str, keyword: bool) -> None:
    """The guard calls the aliasing check until a call of the kernel returns: a first call
    that aliases is refused, and so is the next one, until one passes."""

    def maybe_view(x: torch.Tensor, n: int) -> torch.Tensor:
        return x if n == 0 else x * n

    def maybe_view_kw(x: torch.Tensor, *, n: int) -> torch.Tensor:
        return maybe_view(x, n)

    schema = "(Tensor x, *, int n) -> Tensor" if keyword else "(Tensor x, int n) -> Tensor"
    op = register_vmap_op(
        maybe_view_kw if keyword else maybe_view,
        name=f"{ns}::maybe_view",
        schema=schema,
        fake_fn=_empty,
        differentiable=False,
    )
    call = (lambda x, n: op(x, n=n)) if keyword else op
    x = torch.randn(3)
    for _ in range(2):
        with pytest.raises(RuntimeError, match=rf"{ns}::maybe_view: output 0 of the function"):
            call(x, 0)
    with pytest.raises(RuntimeError, match="aliases"):
        call(x.requires_grad_(), 0)  # below autograd, checked too
    torch.testing.assert_close(call(x, 2), x.detach() * 2)
    # checked once a call passed, as every kernel is: later calls are the kernel's own
    assert call(x.detach(), 0) is not None


@pytest.mark.parametrize(
    ("label", "factory", "call", "guard", "kernel"),
    [
        ("positional", _pair, lambda op, x: op.overload(x, x), "guarded", "f"),
        ("keyword-only", _keyword, lambda op, x: op.overload(x, w=x), "guarded_keywords", "f"),
        ("list", _list, lambda op, x: op.overload([x, x]), "guarded_lists", "f"),
    ],
)
@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "requires_grad"])
def test_a_call_runs_the_guard_then_the_kernel(
    ns: str, label: str, factory: Any, call: Any, guard: str, kernel: str, requires_grad: bool
) -> None:
    """After a first call passed the aliasing check, a call through the dispatcher runs one
    frame of opreg's, the guard, which calls the kernel itself (no wrapper object), below
    autograd or not (the op object's direct call runs the same guard: test_call_path)."""
    seen: Seen = []
    op = factory(ns, seen)
    x = _r(requires_grad)
    call(op, x)  # the first call runs the aliasing check
    frames: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            frames.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        out = call(op, x)
    finally:
        sys.setprofile(None)
    # the test's lambda, the guard (which may ask requires_grad about a list), the kernel
    before = frames[: frames.index(kernel)]
    # (OpOverload.__call__ is torch's frame, into the dispatcher)
    skipped = ("requires_grad", "<genexpr>", "__call__")
    assert [f for f in before if f not in skipped] == ["<lambda>", guard]
    assert "first" not in frames and "check_fresh_outputs" not in frames
    assert seen == [False, False] and not out.requires_grad
