"""Ops that write to their arguments (``mutates_args``) under vmap: ``vmap_fn`` receives the
written arguments batched at dim 0 as views of the caller's tensors (or folded copies written
back), an op without ``vmap_fn`` loops writing each entry's slice, and a written argument that
vmap leaves unbatched while others are batched is an error naming the op and the argument."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.func import grad, vmap

from opreg_core import register_vmap_op

# (in_dims per level, outermost first; the per-sample shape): depth 1 to 3, dims 0, -1, middle
CASES = [
    ([(0, 0)], (4, 5)),
    ([(1, 1)], (4, 5)),
    ([(-1, 0)], (4, 5)),
    ([(0, 0), (0, 0)], (4, 5)),
    ([(-1, -1), (1, 1)], (4, 5)),  # the fold of these two levels is no view: copied back
    ([(0, 0), (-1, -1), (1, 1)], (4, 5)),
    ([(2, 0), (1, None), (0, 0)], (4, 5)),  # y unbatched at one level (x is batched)
]
SIZES = (3, 2, 2)


def _batched(shape: tuple[int, ...], levels: list[tuple[Any, ...]], arg: int) -> torch.Tensor:
    """A random tensor with the batch dims of ``levels`` where their in_dims put them for
    argument ``arg`` (so it is non-contiguous wherever a batch dim is not in front)."""
    t = torch.randn(shape)
    for level, size in zip(reversed(levels), reversed(SIZES[: len(levels)]), strict=False):
        d = level[arg]
        if d is not None:
            t = torch.stack([torch.randn_like(t) for _ in range(size)], d % (t.dim() + 1))
    return t


def _nest(op: Callable[..., Any], levels: list[tuple[Any, ...]]) -> Callable[..., Any]:
    fn = op
    for dims in reversed(levels):
        fn = vmap(fn, in_dims=dims, out_dims=None)
    return fn


def _axpy(x: torch.Tensor, y: torch.Tensor) -> None:
    x.mul_(2).add_(y.sin())


def _op(ns: str, name: str, with_vmap_fn: bool) -> Any:
    seen: list[torch.Tensor] = []

    def vmap_fn(x: torch.Tensor, y: torch.Tensor) -> None:
        seen.append(x)
        _axpy(x, y)

    extra: dict[str, Any] = (
        {"vmap_fn": vmap_fn, "fake_vmap_fn": lambda x, y: None} if with_vmap_fn else {}
    )
    op = register_vmap_op(
        _axpy,
        name=f"{ns}::{name}",
        schema="(Tensor(a!) x, Tensor y) -> ()",
        mutates_args=("x",),
        fake_fn=lambda x, y: None,
        **extra,
    )
    op.seen = seen
    return op


@pytest.mark.parametrize("with_vmap_fn", [True, False], ids=["vmap_fn", "loop"])
@pytest.mark.parametrize(("levels", "shape"), CASES, ids=str)
def test_writes_land_in_the_callers_tensor(
    ns: str, with_vmap_fn: bool, levels: list[tuple[Any, ...]], shape: tuple[int, ...]
) -> None:
    op = _op(ns, "axpy", with_vmap_fn)
    x, y = _batched(shape, levels, 0), _batched(shape, levels, 1)
    expected = _per_entry(x, y, levels)
    x_id = x.data_ptr()
    _nest(op, levels)(x, y)
    torch.testing.assert_close(x, expected)
    assert x.data_ptr() == x_id
    if with_vmap_fn:
        assert len(op.seen) == 1 and op.seen[0].shape[0] == x.numel() // (4 * 5)
        assert op.vmap_stats.loop == 0
    else:
        assert op.vmap_stats.loop >= len(levels)  # the loop ran at every level


def _per_entry(x: torch.Tensor, y: torch.Tensor, levels: list[tuple[Any, ...]]) -> torch.Tensor:
    """What vmap must leave in ``x``: ``_axpy`` on each entry's slice of a copy of ``x``, one
    entry at a time (a per-sample loop without vmap)."""
    out = x.clone()

    def run(xs: torch.Tensor, ys: torch.Tensor, depth: int) -> None:
        if depth == len(levels):
            _axpy(xs, ys)
            return
        dx, dy = levels[depth]
        for i in range(xs.shape[dx]):
            run(xs.select(dx, i), ys if dy is None else ys.select(dy, i), depth + 1)

    run(out, y, 0)
    return out


@pytest.mark.parametrize("with_vmap_fn", [True, False], ids=["vmap_fn", "loop"])
def test_an_unbatched_written_argument_is_an_error(ns: str, with_vmap_fn: bool) -> None:
    op = _op(ns, "axpy", with_vmap_fn)
    x = torch.zeros(5)
    with pytest.raises(RuntimeError, match=rf"{ns}::axpy: vmap cannot write to argument 'x'"):
        vmap(op, in_dims=(None, 0), out_dims=None)(x, torch.ones(3, 5))
    with pytest.raises(RuntimeError, match="cannot write to argument 'x'"):  # at an outer level
        _nest(op, [(None, 0), (0, 0)])(torch.zeros(2, 5), torch.ones(3, 2, 5))
    assert torch.equal(x, torch.zeros(5))


def _swiglu_pair(ns: str, with_vmap_fn: bool) -> tuple[Any, Any]:
    """The in-place backward pattern: ``silu(a) * b`` whose backward writes the gradients into
    buffers through a mutating op (here clones of the saved inputs)."""

    def write(a: torch.Tensor, b: torch.Tensor, g: torch.Tensor) -> None:
        s = torch.sigmoid(a)
        silu = a * s
        da, db = g * b * (s + silu * (1 - s)), g * silu
        a.copy_(da)
        b.copy_(db)

    extra: dict[str, Any] = (
        {"vmap_fn": write, "fake_vmap_fn": lambda a, b, g: None} if with_vmap_fn else {}
    )
    writer = register_vmap_op(
        write,
        name=f"{ns}::swiglu_bwd_",
        schema="(Tensor(a!) a, Tensor(b!) b, Tensor g) -> ()",
        mutates_args=("a", "b"),
        fake_fn=lambda a, b, g: None,
        differentiable=False,
        **extra,
    )

    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = (t.clone() for t in ctx.saved_tensors)
        writer(a, b, g)
        return a, b

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(*inputs)

    op = register_vmap_op(
        lambda a, b: torch.nn.functional.silu(a) * b,
        name=f"{ns}::swiglu",
        schema="(Tensor a, Tensor b) -> Tensor",
        fake_fn=lambda a, b: torch.empty_like(a),
        setup_context=setup,
        backward=backward,
    )
    return op, writer


def _reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(a) * b


TRANSFORMS: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
    "vmap(grad)": lambda f: vmap(grad(lambda a, b: f(a, b).sum(), argnums=(0, 1))),
    "vmap(vmap(grad))": lambda f: vmap(
        vmap(grad(lambda a, b: f(a, b).sum(), argnums=(0, 1)), in_dims=1), in_dims=-1
    ),
    "grad(vmap)": lambda f: grad(lambda a, b: vmap(f)(a, b).sum(), argnums=(0, 1)),
    "grad(vmap(vmap(vmap)))": lambda f: grad(
        lambda a, b: vmap(vmap(vmap(f), in_dims=1), in_dims=-1)(a, b).sum(), argnums=(0, 1)
    ),
}


@pytest.mark.parametrize("with_vmap_fn", [True, False], ids=["vmap_fn", "loop"])
@pytest.mark.parametrize("transform", list(TRANSFORMS))
def test_an_in_place_backward_under_grad_and_vmap(
    ns: str, with_vmap_fn: bool, transform: str
) -> None:
    op, writer = _swiglu_pair(ns, with_vmap_fn)
    a, b = torch.randn(3, 4, 5, 2), torch.randn(3, 4, 5, 2)
    got = TRANSFORMS[transform](op)(a, b)
    expected = TRANSFORMS[transform](_reference)(a, b)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e)
    if transform.startswith("vmap"):  # the backward runs under vmap: the writer is batched
        stats = writer.vmap_stats
        assert (stats.fast if with_vmap_fn else stats.loop) > 0


@pytest.mark.parametrize("with_vmap_fn", [True, False], ids=["vmap_fn", "loop"])
def test_compiled_vmap_of_a_writing_op(ns: str, with_vmap_fn: bool) -> None:
    op = _op(ns, "axpy", with_vmap_fn)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        _nest(op, [(-1, -1), (1, 1)])(x, y)
        return x * 1

    x, y = torch.randn(4, 3, 2), torch.randn(4, 3, 2)
    eager_x = x.clone()
    step(eager_x, y)
    torch._dynamo.reset()
    out = torch.compile(step, backend="aot_eager", fullgraph=True)(x, y)
    torch.testing.assert_close(x, eager_x)
    torch.testing.assert_close(out, eager_x)


def test_compiled_grad_of_vmap_with_an_in_place_backward(ns: str) -> None:
    op, _ = _swiglu_pair(ns, True)
    fn = TRANSFORMS["vmap(grad)"](op)
    a, b = torch.randn(3, 6), torch.randn(3, 6)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="aot_eager")(a, b)
    for g, e in zip(got, TRANSFORMS["vmap(grad)"](_reference)(a, b), strict=True):
        torch.testing.assert_close(g, e)
