"""Forward-mode AD: the user's jvp under torch.func.jvp, jacfwd, hessian, dual tensors and every
composition with vmap (1-3 levels), grad and jacrev, against the same function in plain PyTorch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch.func import grad, hessian, jacfwd, jacrev, jvp, vmap

from opreg_core import register_vmap_op

Fn = Callable[..., torch.Tensor]


def _f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x * sum(sin(y)): two inputs whose tangents enter differently."""
    return x * y.sin().sum()


def _vf(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    total = y.sin().reshape(y.shape[0], -1).sum(1)
    return x * total.reshape(-1, *([1] * (x.dim() - 1)))


def _fake(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(*inputs)


def _backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = ctx.saved_tensors
    return g * y.sin().sum(), (g * x).sum() * y.cos()


def _jvp(ctx: Any, x_t: torch.Tensor | None, y_t: torch.Tensor | None) -> torch.Tensor:
    x, y = ctx.saved_tensors
    out = torch.zeros_like(x)
    if x_t is not None:
        out = out + x_t * y.sin().sum()
    if y_t is not None:
        out = out + x * (y.cos() * y_t).sum()
    return out


def _backward_by_vjp(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The backward as authors write it for an op built from torch calls: torch.func.vjp."""
    x, y = ctx.saved_tensors
    pullback = torch.func.vjp(_f, x, y)[1]
    return tuple(pullback(g))


def _jvp_by_jvp(ctx: Any, x_t: torch.Tensor | None, y_t: torch.Tensor | None) -> torch.Tensor:
    """The jvp as authors write it for an op built from torch calls: torch.func.jvp."""
    x, y = ctx.saved_tensors
    x_t = torch.zeros_like(x) if x_t is None else x_t
    y_t = torch.zeros_like(y) if y_t is None else y_t
    tangent: torch.Tensor = torch.func.jvp(_f, (x, y), (x_t, y_t))[1]
    return tangent


#: (backward, jvp) pairs: hand-written, and built with torch.func transforms (which autograd
#: calls inside a functorch level's dispatch, where a transform cannot start by itself).
RULES = {"hand-written": (_backward, _jvp), "torch.func": (_backward_by_vjp, _jvp_by_jvp)}


@pytest.fixture(params=list(RULES.values()), ids=list(RULES))
def op(ns: str, request: pytest.FixtureRequest) -> Any:
    backward, jvp_rule = request.param
    return register_vmap_op(
        _f,
        fake_fn=_fake,
        vmap_fn=_vf,
        fake_vmap_fn=_fake,
        backward=backward,
        setup_context=_setup,
        jvp=jvp_rule,
        name=f"{ns}::mul",
    )


def _rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64)


def _same(case: Callable[[Fn], Any], op: Any) -> None:
    torch.testing.assert_close(case(op), case(_f))


X, Y = (3, 2), (4,)


# -- one level --------------------------------------------------------------------------------

ONE_LEVEL: dict[str, Callable[[Fn, tuple[torch.Tensor, ...]], Any]] = {
    "jvp": lambda fn, v: jvp(fn, v[:2], v[2:]),
    "jvp x only": lambda fn, v: jvp(lambda a: fn(a, v[1]), v[:1], v[2:3]),
    "jvp y only": lambda fn, v: jvp(lambda b: fn(v[0], b), v[1:2], v[3:4]),
    "jacfwd x": lambda fn, v: jacfwd(fn)(v[0], v[1]),
    "jacfwd x, y": lambda fn, v: jacfwd(fn, argnums=(0, 1))(v[0], v[1]),
    "hessian": lambda fn, v: hessian(lambda a, b: fn(a, b).pow(2).sum(), argnums=(0, 1))(
        v[0], v[1]
    ),
    "jacrev(jacrev)": lambda fn, v: jacrev(jacrev(lambda a, b: fn(a, b).pow(2).sum()))(v[0], v[1]),
    "jacfwd(jacrev)": lambda fn, v: jacfwd(jacrev(fn, argnums=1), argnums=1)(v[0], v[1]),
    "jacrev(jacfwd)": lambda fn, v: jacrev(jacfwd(fn, argnums=1), argnums=1)(v[0], v[1]),
    "jacfwd(jacfwd)": lambda fn, v: jacfwd(jacfwd(fn, argnums=1), argnums=1)(v[0], v[1]),
    "grad(jvp)": lambda fn, v: grad(
        lambda a, b: jvp(fn, (a, b), v[2:])[1].pow(2).sum(), argnums=(0, 1)
    )(v[0], v[1]),
    "jvp(grad)": lambda fn, v: jvp(
        grad(lambda a, b: fn(a, b).pow(2).sum(), argnums=(0, 1)), v[:2], v[2:]
    ),
    "jvp(jvp)": lambda fn, v: jvp(lambda a: jvp(fn, (a, v[1]), v[2:])[1], v[:1], v[2:3]),
}


@pytest.mark.parametrize("case", ONE_LEVEL.values(), ids=ONE_LEVEL.keys())
def test_one_level_matches_plain_pytorch(op: Any, case: Callable[..., Any]) -> None:
    values = (_rand(*X), _rand(*Y), _rand(*X), _rand(*Y))
    _same(lambda fn: case(fn, values), op)


# -- under vmap, 1 to 3 levels ------------------------------------------------------------------


def _vmap_n(fn: Fn, depth: int, y_batched: bool) -> Fn:
    """``fn`` under ``depth`` vmaps; x batched at every level (at dim 1 on the second level),
    y only if ``y_batched``."""
    for level in range(depth):
        fn = vmap(fn, in_dims=(1 if level == 1 else 0, 0 if y_batched else None))
    return fn


SIZES = (2, 3, 2)


def _batched(depth: int, y_batched: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs for :func:`_vmap_n` with batch sizes 2, 3, 2 from the innermost level out."""
    x_shape = {1: (2,), 2: (2, 3), 3: (2, 2, 3)}[depth]  # level 1 maps dim 1
    y_shape = tuple(reversed(SIZES[:depth])) if y_batched else ()
    return _rand(*x_shape, *X), _rand(*y_shape, *Y)


VMAPPED: dict[str, Callable[[Fn, int, bool, tuple[torch.Tensor, ...]], Any]] = {
    "jvp(vmap)": lambda fn, d, yb, v: jvp(_vmap_n(fn, d, yb), v[:2], v[2:]),
    "vmap(jvp)": lambda fn, d, yb, v: _vmap_n(
        lambda a, b: jvp(fn, (a, b), (torch.ones_like(a), torch.ones_like(b)))[1], d, yb
    )(v[0], v[1]),
    "vmap(jacfwd)": lambda fn, d, yb, v: _vmap_n(jacfwd(fn, argnums=(0, 1)), d, yb)(v[0], v[1]),
    "jacfwd(vmap)": lambda fn, d, yb, v: jacfwd(_vmap_n(fn, d, yb), argnums=(0, 1))(v[0], v[1]),
    "vmap(hessian)": lambda fn, d, yb, v: _vmap_n(
        hessian(lambda a, b: fn(a, b).pow(2).sum(), argnums=1), d, yb
    )(v[0], v[1]),
    "hessian(vmap)": lambda fn, d, yb, v: hessian(
        lambda a, b: _vmap_n(fn, d, yb)(a, b).pow(2).sum(), argnums=1
    )(v[0], v[1]),
    "jacfwd(jacrev(vmap))": lambda fn, d, yb, v: jacfwd(
        jacrev(lambda b: _vmap_n(fn, d, yb)(v[0], b).sum())
    )(v[1]),
    "jacfwd(jacfwd(vmap))": lambda fn, d, yb, v: jacfwd(
        jacfwd(lambda b: _vmap_n(fn, d, yb)(v[0], b).sum())
    )(v[1]),
    "vmap(jacfwd(jacrev))": lambda fn, d, yb, v: _vmap_n(
        jacfwd(jacrev(lambda a, b: fn(a, b).pow(2).sum(), argnums=1), argnums=1), d, yb
    )(v[0], v[1]),
    "grad(jvp(vmap))": lambda fn, d, yb, v: grad(
        lambda a: jvp(_vmap_n(fn, d, yb), (a, v[1]), v[2:])[1].pow(2).sum()
    )(v[0]),
    "dual tensors": lambda fn, d, yb, v: _dual(_vmap_n(fn, d, yb), v),
    "grad(vmap)": lambda fn, d, yb, v: grad(
        lambda a, b: _vmap_n(fn, d, yb)(a, b).pow(2).sum(), argnums=(0, 1)
    )(v[0], v[1]),
    "vmap(grad)": lambda fn, d, yb, v: _vmap_n(
        grad(lambda a, b: fn(a, b).pow(2).sum(), argnums=(0, 1)), d, yb
    )(v[0], v[1]),
}


def _dual(fn: Fn, v: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    with fwAD.dual_level():
        out = fn(fwAD.make_dual(v[0], v[2]), fwAD.make_dual(v[1], v[3]))
        primal, tangent = fwAD.unpack_dual(out)
    assert tangent is not None
    return primal, tangent


@pytest.mark.parametrize("y_batched", [False, True], ids=["y unbatched", "y batched"])
@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("case", VMAPPED.values(), ids=VMAPPED.keys())
def test_under_vmap_matches_plain_pytorch(
    op: Any, case: Callable[..., Any], depth: int, y_batched: bool
) -> None:
    x, y = _batched(depth, y_batched)
    values = (x, y, torch.randn_like(x), torch.randn_like(y))
    op.vmap_stats.reset()
    _same(lambda fn: case(fn, depth, y_batched, values), op)
    # the batched op ran (its jvp derived from the user's), never a per-sample loop
    assert op.vmap_stats.fast >= 1 and op.vmap_stats.loop == 0


def _jvp_by_vmap(ctx: Any, x_t: torch.Tensor | None, y_t: torch.Tensor | None) -> torch.Tensor:
    """A jvp that maps a per-row torch.func.jvp with torch.vmap: two transforms in the rule."""
    x, y = ctx.saved_tensors
    x_t = torch.zeros_like(x) if x_t is None else x_t
    y_t = torch.zeros_like(y) if y_t is None else y_t

    def row(a: torch.Tensor, a_t: torch.Tensor) -> torch.Tensor:
        tangent: torch.Tensor = torch.func.jvp(lambda r, s: r * s.sin().sum(), (a, y), (a_t, y_t))[
            1
        ]
        return tangent

    return torch.vmap(row)(x, x_t)


def _backward_by_jacrev(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A backward that contracts the Jacobian torch.func.jacrev builds."""
    x, y = ctx.saved_tensors
    jx, jy = torch.func.jacrev(_f, argnums=(0, 1))(x, y)
    return torch.tensordot(g, jx, dims=g.dim()), torch.tensordot(g, jy, dims=g.dim())


SOME_CASES = ("jvp", "jacfwd x, y", "hessian", "jacfwd(jacfwd)", "jvp(grad)", "grad(jvp)")
SOME_VMAPPED = ("jvp(vmap)", "vmap(jvp)", "vmap(jacfwd)", "hessian(vmap)", "dual tensors")


@pytest.mark.parametrize("name", SOME_CASES + SOME_VMAPPED)
def test_rules_built_with_vmap_and_jacrev(ns: str, name: str) -> None:
    """Rules that start other transforms (torch.vmap, jacrev) work under each transform."""
    op = register_vmap_op(
        _f, fake_fn=_fake, vmap_fn=_vf, fake_vmap_fn=_fake, backward=_backward_by_jacrev,
        setup_context=_setup, jvp=_jvp_by_vmap, name=f"{ns}::mul_vmap_rules",
    )  # fmt: skip
    if name in ONE_LEVEL:
        values = (_rand(*X), _rand(*Y), _rand(*X), _rand(*Y))
        _same(lambda fn: ONE_LEVEL[name](fn, values), op)
        return
    for depth in (1, 2):
        x, y = _batched(depth, False)
        values = (x, y, torch.randn_like(x), torch.randn_like(y))
        case = VMAPPED[name]
        torch.testing.assert_close(case(op, depth, False, values), case(_f, depth, False, values))


def test_reverse_over_reverse_keeps_the_ops_term_without_jvp(ns: str) -> None:
    """The Function's forward runs with grad mode off; under nested torch.func levels the
    outer level must still record the op (it silently did not before forward mode)."""
    op = register_vmap_op(
        _f, fake_fn=_fake, vmap_fn=_vf, fake_vmap_fn=_fake, backward=_backward,
        setup_context=_setup, name=f"{ns}::nojvp2",
    )  # fmt: skip
    x, y = _rand(*X), _rand(*Y)
    loss = lambda fn: lambda a, b: fn(a, b).pow(2).sum()  # noqa: E731
    torch.testing.assert_close(jacrev(jacrev(loss(op)))(x, y), jacrev(jacrev(loss(_f)))(x, y))
    torch.testing.assert_close(
        jacrev(jacrev(loss(op), argnums=1), argnums=1)(x, y),
        jacrev(jacrev(loss(_f), argnums=1), argnums=1)(x, y),
    )


# -- dual tensors, gradcheck ------------------------------------------------------------------


def test_dual_tensors_and_reverse_mode_together(op: Any) -> None:
    x, y, tx, ty = _rand(*X), _rand(*Y), _rand(*X), _rand(*Y)
    results = []
    for fn in (op, _f):
        xr = x.clone().requires_grad_()
        with fwAD.dual_level():
            out = fn(fwAD.make_dual(xr, tx), fwAD.make_dual(y, ty))
            primal, tangent = fwAD.unpack_dual(out)
            # the tangent is itself differentiable in reverse mode
            (g,) = torch.autograd.grad(tangent.pow(2).sum(), xr)
        results.append((primal, tangent, g))
    torch.testing.assert_close(results[0], results[1])


def test_gradcheck_with_forward_ad(op: Any) -> None:
    x = _rand(*X).requires_grad_()
    y = _rand(*Y).requires_grad_()
    assert torch.autograd.gradcheck(op, (x, y), check_forward_ad=True)
    assert torch.autograd.gradcheck(
        vmap(op, in_dims=(0, None)), (x, y), check_forward_ad=True, check_batched_forward_grad=True
    )
    xs = _rand(2, *X).requires_grad_()
    assert torch.autograd.gradcheck(
        vmap(vmap(op, in_dims=(0, None)), in_dims=(1, None)), (xs, y), check_forward_ad=True
    )


# -- contract: inputs without tangents, lists, non-tensors, several outputs, no backward ----------


def test_list_and_non_tensor_inputs_get_list_and_none_tangents(ns: str) -> None:
    seen: list[tuple[Any, ...]] = []

    def f(xs: list[torch.Tensor], k: float) -> torch.Tensor:
        return xs[0] * xs[1] * k

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        xs, k = inputs
        ctx.save_for_backward(*xs)
        ctx.k = k

    def f_jvp(ctx: Any, xs_t: list[torch.Tensor | None] | None, k_t: None) -> torch.Tensor:
        seen.append((type(xs_t).__name__, k_t))
        a, b = ctx.saved_tensors
        assert xs_t is not None
        ta, tb = xs_t
        out = torch.zeros_like(a)
        if ta is not None:
            out = out + ta * b * ctx.k
        if tb is not None:
            out = out + a * tb * ctx.k
        return out

    fake = lambda xs, k: torch.empty_like(xs[0])  # noqa: E731
    op = register_vmap_op(
        f, fake_fn=fake, vmap_fn=f, fake_vmap_fn=fake, setup_context=setup, jvp=f_jvp,
        name=f"{ns}::prod",
    )  # fmt: skip
    a, b, ta = _rand(3), _rand(3), _rand(3)
    _, t = jvp(lambda p: op([p, b], 2.0), (a,), (ta,))
    torch.testing.assert_close(t, ta * b * 2.0)
    assert seen[-1] == ("list", None)
    A, B = _rand(4, 3), _rand(4, 3)
    TA, TB = torch.randn_like(A), torch.randn_like(B)
    _, t = jvp(vmap(lambda p, q: op([p, q], 3.0)), (A, B), (TA, TB))
    torch.testing.assert_close(t, (TA * B + A * TB) * 3.0)
    assert op.vmap_stats.fast >= 1


def test_several_outputs(ns: str) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.sin(), x.exp().sum(-1)

    def fake(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.empty_like(x), x.new_empty(x.shape[:-1])

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(inputs[0])

    def f_jvp(ctx: Any, x_t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        (x,) = ctx.saved_tensors
        return x.cos() * x_t, (x.exp() * x_t).sum(-1)

    op = register_vmap_op(
        f, fake_fn=fake, vmap_fn=f, fake_vmap_fn=fake, vmap_out_dims=(0, 0),
        setup_context=setup, jvp=f_jvp, name=f"{ns}::two",
    )  # fmt: skip
    x, t = _rand(3, 4), _rand(3, 4)
    torch.testing.assert_close(jvp(op, (x,), (t,)), jvp(f, (x,), (t,)))
    torch.testing.assert_close(jvp(vmap(op), (x,), (t,)), jvp(vmap(f), (x,), (t,)))
    torch.testing.assert_close(jacfwd(vmap(op))(x), jacfwd(vmap(f))(x))


def test_save_for_forward_keeps_its_own_tensors(ns: str) -> None:
    """A setup_context that saves different tensors for the backward and for the jvp (as
    torch.autograd.Function allows): each reads its own, also in the derived batched op."""

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        x, y = inputs
        ctx.save_for_backward(x, y)
        ctx.save_for_forward(y.sin().sum())

    def f_jvp(ctx: Any, x_t: torch.Tensor | None, y_t: None) -> torch.Tensor:
        (s,) = ctx.saved_tensors
        assert x_t is not None and y_t is None
        return x_t * s

    op = register_vmap_op(
        _f, fake_fn=_fake, vmap_fn=_vf, fake_vmap_fn=_fake, backward=_backward,
        setup_context=setup, jvp=f_jvp, name=f"{ns}::sff",
    )  # fmt: skip
    x, y, tx = _rand(*X), _rand(*Y), _rand(*X)
    Xb, TX = _rand(2, *X), _rand(2, *X)
    for call, args, tangent in ((op, x, tx), (vmap(op, in_dims=(0, None)), Xb, TX)):
        base = _f if call is op else vmap(_f, in_dims=(0, None))
        torch.testing.assert_close(
            jvp(lambda a: call(a, y), (args,), (tangent,)),  # noqa: B023
            jvp(lambda a: base(a, y), (args,), (tangent,)),  # noqa: B023
        )
        torch.testing.assert_close(
            grad(lambda b: call(args, b).sum())(y),  # noqa: B023
            grad(lambda b: base(args, b).sum())(y),  # noqa: B023
        )


def test_jvp_without_backward_is_forward_only(ns: str) -> None:
    op = register_vmap_op(
        _f, fake_fn=_fake, vmap_fn=_vf, fake_vmap_fn=_fake, setup_context=_setup, jvp=_jvp,
        name=f"{ns}::fwd_only",
    )  # fmt: skip
    assert op.has_jvp and not op.has_backward and op.jvp is _jvp
    x, y = _rand(*X), _rand(*Y)
    torch.testing.assert_close(jacfwd(op, argnums=1)(x, y), jacfwd(_f, argnums=1)(x, y))
    with pytest.raises(RuntimeError, match=f"{ns}::fwd_only was registered without a backward"):
        jacrev(op)(x, y)


def test_broadcasting_op_tangents_are_input_shaped(ns: str) -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * y

    def fake(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.empty(torch.broadcast_shapes(x.shape, y.shape), dtype=x.dtype)

    shapes: list[tuple[Any, ...]] = []

    def f_jvp(ctx: Any, x_t: torch.Tensor | None, y_t: torch.Tensor | None) -> torch.Tensor:
        x, y = ctx.saved_tensors
        shapes.append(tuple(None if t is None else tuple(t.shape) for t in (x_t, y_t)))
        out = torch.zeros(torch.broadcast_shapes(x.shape, y.shape), dtype=x.dtype)
        if x_t is not None:
            out = out + x_t * y
        if y_t is not None:
            out = out + x * y_t
        return out

    def vf(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # batch at 0, per-sample broadcast
        extra = [1] * (y.dim() - x.dim())
        return x.reshape(x.shape[0], *extra, *x.shape[1:]) * y

    op = register_vmap_op(
        f, fake_fn=fake, vmap_fn=vf, fake_vmap_fn=fake, setup_context=_setup, jvp=f_jvp,
        name=f"{ns}::bmul",
    )  # fmt: skip
    x, y, tx = _rand(3), _rand(2, 3), _rand(3)
    torch.testing.assert_close(
        jvp(lambda a: op(a, y), (x,), (tx,)), jvp(lambda a: f(a, y), (x,), (tx,))
    )
    assert shapes[-1] == ((3,), None)
    X2, TX2 = _rand(4, 3), _rand(4, 3)
    torch.testing.assert_close(
        jvp(vmap(lambda a: op(a, y)), (X2,), (TX2,)), jvp(vmap(lambda a: f(a, y)), (X2,), (TX2,))
    )
    assert shapes[-1] == ((3,), None)  # per sample, inside the derived jvp


# -- errors -------------------------------------------------------------------------------------


def test_tangent_of_the_wrong_shape_is_an_error(ns: str) -> None:
    def bad_jvp(ctx: Any, x_t: torch.Tensor | None, y_t: torch.Tensor | None) -> Any:
        return x_t  # the input's shape (3,), not the output's (2, 3)

    op = register_vmap_op(
        lambda x, y: x * y,
        fake_fn=lambda x, y: x.new_empty(torch.broadcast_shapes(x.shape, y.shape)),
        vmap_fn=lambda x, y: x * y,
        fake_vmap_fn=lambda x, y: x.new_empty(torch.broadcast_shapes(x.shape, y.shape)),
        schema="(Tensor x, Tensor y) -> Tensor",
        jvp=bad_jvp,
        name=f"{ns}::bad",
    )
    x, y = _rand(3), _rand(2, 3)
    message = rf"{ns}::bad: jvp returned a tangent of shape \(3,\) for output 0 of shape \(2, 3\)"
    with pytest.raises(RuntimeError, match=message):
        jvp(lambda a: op(a, y), (x,), (x,))
    with pytest.raises(RuntimeError, match=message):
        jvp(vmap(lambda a: op(a, y)), (x[None],), (x[None],))
    with pytest.raises(RuntimeError, match=message), fwAD.dual_level():
        op(fwAD.make_dual(x, x), y)


def test_wrong_number_of_tangents_and_missing_setup_context(ns: str) -> None:
    def two(ctx: Any, x_t: Any, y_t: Any) -> Any:
        return x_t, y_t

    op = register_vmap_op(
        _f, fake_fn=_fake, backward=_backward, setup_context=_setup, jvp=two, name=f"{ns}::two"
    )
    x, y = _rand(*X), _rand(*Y)
    with pytest.raises(RuntimeError, match=f"{ns}::two: jvp returned 2 tangents, expected one"):
        jvp(op, (x, y), (x, y))
    bare = register_vmap_op(_f, fake_fn=_fake, jvp=_jvp, name=f"{ns}::bare")
    with pytest.raises(RuntimeError, match=f"{ns}::bare: jvp raised ValueError.*setup_context"):
        jvp(bare, (x, y), (x, y))


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"jvp": 3}, TypeError, "jvp must be a callable, got a int"),
        ({"jvp": _jvp, "differentiable": False}, ValueError, "jvp is given but differentiable"),
    ],
)
def test_bad_jvp_options(ns: str, options: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=f"{ns}::o: {message}"):
        register_vmap_op(_f, fake_fn=_fake, name=f"{ns}::o", **options)


def test_jvp_on_a_mutating_op_is_refused(ns: str) -> None:
    def f(x: torch.Tensor) -> None:
        x.add_(1)

    with pytest.raises(ValueError, match=f"{ns}::m: jvp is not supported for ops that mutate"):
        register_vmap_op(
            f, fake_fn=lambda x: None, mutates_args="x", jvp=lambda ctx, t: t, name=f"{ns}::m"
        )


def test_jvp_on_an_op_returning_a_list_is_refused(ns: str) -> None:
    def split(x: torch.Tensor) -> list[torch.Tensor]:
        return [x * 2, x * 3]

    with pytest.raises(ValueError, match=f"{ns}::split: jvp is not supported for ops that return"):
        register_vmap_op(
            split,
            fake_fn=lambda x: [torch.empty_like(x), torch.empty_like(x)],
            jvp=lambda ctx, t: [2 * t, 3 * t],
            name=f"{ns}::split",
        )


def test_keyword_only_tensor_gets_its_tangent_last(ns: str) -> None:
    def g(x: torch.Tensor, *, w: torch.Tensor) -> torch.Tensor:
        return x * w

    def g_jvp(ctx: Any, x_t: torch.Tensor | None, w_t: torch.Tensor | None) -> torch.Tensor:
        x, w = ctx.saved_tensors
        out = torch.zeros_like(x)
        if x_t is not None:
            out = out + x_t * w
        if w_t is not None:
            out = out + x * w_t
        return out

    fake = lambda x, *, w: torch.empty_like(x)  # noqa: E731
    op = register_vmap_op(
        g, fake_fn=fake, vmap_fn=g, fake_vmap_fn=fake, setup_context=_setup, jvp=g_jvp,
        name=f"{ns}::kw",
    )  # fmt: skip
    x, w, tw = _rand(3), _rand(3), _rand(3)
    expected = jvp(lambda b: g(x, w=b), (w,), (tw,))
    torch.testing.assert_close(jvp(lambda b: op(x, w=b), (w,), (tw,)), expected)
    X, W, TW = _rand(2, 3), _rand(2, 3), _rand(2, 3)
    torch.testing.assert_close(
        jvp(vmap(lambda a, b: op(a, w=b)), (X, W), (TW, TW)),
        jvp(vmap(lambda a, b: g(a, w=b)), (X, W), (TW, TW)),
    )


def test_op_without_jvp_still_raises(ns: str) -> None:
    op = register_vmap_op(
        _f, fake_fn=_fake, vmap_fn=_vf, fake_vmap_fn=_fake, backward=_backward,
        setup_context=_setup, name=f"{ns}::nojvp",
    )  # fmt: skip
    assert not op.has_jvp and op.jvp is None
    x, y = _rand(*X), _rand(*Y)
    message = f"{ns}::nojvp: forward-mode AD .* needs a jvp"
    for call in (
        lambda: jvp(op, (x, y), (x, y)),
        lambda: hessian(lambda a: op(a, y).sum())(x),
        lambda: jvp(vmap(op, in_dims=(0, None)), (x, y), (x, y)),
    ):
        with pytest.raises(RuntimeError, match=message):
            call()


# -- differentiable=False: zero tangents by declaration, never a leaked one ------------------------


@pytest.mark.parametrize("batched", [False, True], ids=["op", "vmap"])
def test_non_differentiable_op_gives_no_tangent(ns: str, batched: bool) -> None:
    """The fallback is made of differentiable torch calls: differentiating it would give cos."""
    op = register_vmap_op(
        torch.sin,
        fake_fn=torch.empty_like,
        vmap_fn=torch.sin,
        fake_vmap_fn=torch.empty_like,
        differentiable=False,
        name=f"{ns}::sin_nograd",
        schema="(Tensor x) -> Tensor",
    )
    call = vmap(op) if batched else op
    x, t = _rand(2, 3), _rand(2, 3)
    primal, tangent = jvp(call, (x,), (t,))
    torch.testing.assert_close(primal, x.sin())
    torch.testing.assert_close(tangent, torch.zeros_like(x))
    torch.testing.assert_close(jacfwd(call)(x), torch.zeros(2, 3, 2, 3, dtype=x.dtype))
    with fwAD.dual_level():
        out = call(fwAD.make_dual(x, t))
        assert fwAD.unpack_dual(out).tangent is None
        # a tangent that flows around it still works
        around = fwAD.unpack_dual(fwAD.make_dual(x, t) * call(x)).tangent
    torch.testing.assert_close(around, t * x.sin())
