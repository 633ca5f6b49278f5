"""vmap at any depth and with any in_dims runs the user's vmap_fn, and agrees with loops."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.func import vmap

from opreg_core import VmapInfo, register_vmap_op, unregister


def _loop(fn: Callable[..., Any], in_dims: tuple[int | None, ...]) -> Callable[..., Any]:
    """Reference semantics of vmap: call fn per sample and stack along dim 0."""

    def looped(*args: Any) -> Any:
        size = next(a.shape[d] for a, d in zip(args, in_dims, strict=True) if d is not None)
        outs = [
            fn(*[a if d is None else a.select(d, i) for a, d in zip(args, in_dims, strict=True)])
            for i in range(size)
        ]
        if isinstance(outs[0], tuple):
            return tuple(torch.stack(o) for o in zip(*outs, strict=True))
        return torch.stack(outs)

    return looped


def _nest(
    fn: Callable[..., Any], levels: list[tuple[int | None, ...]], how: Callable[..., Any]
) -> Callable[..., Any]:
    """Wrap fn in one transform per level; levels[0] is the outermost."""
    for dims in reversed(levels):
        fn = how(fn, dims)
    return fn


def _scaled_sum_fake(x: torch.Tensor, y: torch.Tensor, k: float) -> torch.Tensor:
    return torch.empty_like(x)


def _scaled_sum_batched(x: torch.Tensor, y: torch.Tensor, k: float) -> torch.Tensor:
    # x: [B, *xs], y: [B, *ys]; per sample x * y.sum() * k
    total = y.reshape(y.shape[0], -1).sum(1)
    return x * total.reshape(-1, *([1] * (x.dim() - 1))) * k


@pytest.fixture
def scaled_sum(ns: str) -> Any:
    def scaled_sum(x: torch.Tensor, y: torch.Tensor, k: float) -> torch.Tensor:
        return x * y.sum() * k

    return register_vmap_op(
        scaled_sum,
        fake_fn=_scaled_sum_fake,
        vmap_fn=_scaled_sum_batched,
        fake_vmap_fn=_scaled_sum_fake,
        name=f"{ns}::scaled_sum",
    )


def test_single_level_uses_vmap_fn(scaled_sum: Any) -> None:
    x, y = torch.randn(5, 3), torch.randn(4, 5)
    out = vmap(scaled_sum, in_dims=(0, 1, None))(x, y, 2.0)
    ref = _loop(scaled_sum.fallback, (0, 1, None))(x, y, 2.0)
    torch.testing.assert_close(out, ref)
    assert (scaled_sum.vmap_stats.fast, scaled_sum.vmap_stats.nested) == (1, 0)


# Each level: (x's mapped dim or None, y's mapped dim or None), not both None.
_level = st.tuples(st.sampled_from([0, 1, -1, None]), st.sampled_from([0, -1, None])).filter(
    lambda dims: dims != (None, None)
)


@pytest.fixture(scope="module")
def prop_op() -> Iterator[Any]:
    def scaled_sum(x: torch.Tensor, y: torch.Tensor, k: float) -> torch.Tensor:
        return x * y.sum() * k

    op = register_vmap_op(
        scaled_sum,
        fake_fn=_scaled_sum_fake,
        vmap_fn=_scaled_sum_batched,
        fake_vmap_fn=_scaled_sum_fake,
        name="opreg_core_test_prop::scaled_sum",
    )
    yield op
    unregister(op.qualname)


@given(levels=st.lists(_level, min_size=1, max_size=4), data=st.data())
def test_any_depth_and_in_dims_match_loops(
    prop_op: Any, levels: list[tuple[int | None, int | None]], data: st.DataObject
) -> None:
    op = prop_op
    op.vmap_stats.reset()
    # Build inputs: per-sample x is (3, 2), y is (4,); insert each level's batch dim.
    sizes = data.draw(st.lists(st.integers(1, 3), min_size=len(levels), max_size=len(levels)))
    x_shape: list[int] = [3, 2]
    y_shape: list[int] = [4]
    for (dx, dy), size in zip(reversed(levels), reversed(sizes), strict=True):
        if dx is not None:
            x_shape.insert(dx if dx >= 0 else len(x_shape) + 1 + dx, size)
        if dy is not None:
            y_shape.insert(dy if dy >= 0 else len(y_shape) + 1 + dy, size)
    x, y = torch.randn(x_shape, dtype=torch.float64), torch.randn(y_shape, dtype=torch.float64)
    dims = [(dx, dy, None) for dx, dy in levels]
    out = _nest(op, dims, lambda f, d: vmap(f, in_dims=d))(x, y, 0.5)
    ref = _nest(op.fallback, dims, lambda f, d: _loop(f, d))(x, y, 0.5)
    torch.testing.assert_close(out, ref)
    # innermost level through op's rule; every other batched level folded into the same call
    assert op.vmap_stats.fast == 1
    assert op.vmap_stats.loop == 0


def test_four_levels_call_vmap_fn_once(scaled_sum: Any) -> None:
    calls: list[tuple[int, ...]] = []

    def spy(x: torch.Tensor, y: torch.Tensor, k: float) -> torch.Tensor:
        calls.append(tuple(x.shape))
        return _scaled_sum_batched(x, y, k)

    scaled_sum = register_vmap_op(
        scaled_sum.fallback,
        fake_fn=_scaled_sum_fake,
        vmap_fn=spy,
        fake_vmap_fn=_scaled_sum_fake,
        name=scaled_sum.qualname,
    )
    x = torch.randn(2, 3, 4, 5, 6)
    y = torch.randn(7)
    f = scaled_sum
    for _ in range(4):
        f = vmap(f, in_dims=(0, None, None))
    out = f(x, y, 1.0)
    torch.testing.assert_close(out, x * y.sum())
    assert calls == [(120, 6)], "one call on the product of the batch sizes"
    assert (scaled_sum.vmap_stats.fast, scaled_sum.vmap_stats.nested) == (1, 3)


def test_unbatched_arguments_are_expanded_without_copy(ns: str) -> None:
    seen: list[torch.Tensor] = []

    def vfn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        seen.append(y)
        return x + y

    op = register_vmap_op(
        lambda x, y: x + y,
        fake_fn=lambda x, y: torch.empty_like(x),
        vmap_fn=vfn,
        fake_vmap_fn=lambda x, y: torch.empty_like(x),
        name=f"{ns}::add",
        schema="(Tensor x, Tensor y) -> Tensor",
    )
    y = torch.randn(3)
    vmap(op, in_dims=(0, None))(torch.randn(8, 3), y)
    assert seen[0].shape == (8, 3) and seen[0].stride(0) == 0
    assert seen[0].data_ptr() == y.data_ptr()


def test_out_dims_variants(ns: str) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return x * 2, x.sum(), torch.ones(2)

    def vf(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (x * 2).movedim(0, -1), x.reshape(x.shape[0], -1).sum(1), torch.ones(2)

    def fake(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return torch.empty_like(x), x.new_empty(()), x.new_empty(2)

    def vfake(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return torch.empty_like(x).movedim(0, -1), x.new_empty(x.shape[0]), x.new_empty(2)

    op = register_vmap_op(
        f,
        fake_fn=fake,
        vmap_fn=vf,
        fake_vmap_fn=vfake,
        vmap_out_dims=(-1, 0, None),
        name=f"{ns}::multi",
    )
    x = torch.randn(4, 5, 3)
    for levels in ([(0,)], [(1,), (0,)], [(0,), (-1,), (0,)]):
        out = _nest(op, levels, lambda g, d: vmap(g, in_dims=d))(x)
        ref = _nest(op.fallback, levels, lambda g, d: vmap(g, in_dims=d))(x)
        for o, r in zip(out, ref, strict=True):
            torch.testing.assert_close(o, r)


def test_list_and_optional_tensor_arguments(ns: str) -> None:
    def f(xs: list[torch.Tensor], w: torch.Tensor | None, n: int) -> torch.Tensor:
        s = torch.stack(xs).sum(0) * n
        return s if w is None else s * w

    def vf(xs: list[torch.Tensor], w: torch.Tensor | None, n: int) -> torch.Tensor:
        s = torch.stack(xs).sum(0) * n
        return s if w is None else s * w

    fake = lambda xs, w, n: torch.empty_like(xs[0])  # noqa: E731
    op = register_vmap_op(f, fake_fn=fake, vmap_fn=vf, fake_vmap_fn=fake, name=f"{ns}::lst")
    xs = [torch.randn(4, 3), torch.randn(3, 4)]
    w = torch.randn(3)
    for weight, wdim in ((w, None), (None, None), (torch.randn(4, 3), 0)):
        out = vmap(op, in_dims=([0, 1], wdim, None))(xs, weight, 2)
        ref = torch.stack(
            [f([xs[0][i], xs[1][:, i]], weight if wdim is None else weight[i], 2) for i in range(4)]
        )
        torch.testing.assert_close(out, ref)
    # nested, list elements batched at different levels
    X = [torch.randn(2, 4, 3), torch.randn(4, 3)]
    out = vmap(vmap(op, in_dims=([0, 0], None, None)), in_dims=([0, None], None, None))(X, w, 1)
    ref = torch.stack(
        [torch.stack([f([X[0][a, b], X[1][b]], w, 1) for b in range(4)]) for a in range(2)]
    )
    torch.testing.assert_close(out, ref)


def test_kwarg_only_arguments(ns: str) -> None:
    def f(x: torch.Tensor, *, scale: float = 1.0, bias: torch.Tensor | None = None) -> torch.Tensor:
        return x * scale if bias is None else x * scale + bias

    fake = lambda x, *, scale=1.0, bias=None: torch.empty_like(x)  # noqa: E731
    op = register_vmap_op(f, fake_fn=fake, vmap_fn=f, fake_vmap_fn=fake, name=f"{ns}::kw")
    x, b = torch.randn(4, 3), torch.randn(4, 3)
    torch.testing.assert_close(vmap(lambda x, b: op(x, scale=2.0, bias=b))(x, b), x * 2 + b)
    torch.testing.assert_close(vmap(lambda x: op(x, scale=3.0, bias=b[0]))(x), x * 3 + b[0])
    torch.testing.assert_close(vmap(vmap(lambda x: op(x, scale=2.0)))(x[None]), x[None] * 2)
    assert op.vmap_stats.nested == 1


def test_custom_vmap_wrap_inputs_receives_info_and_in_dims(ns: str) -> None:
    seen: list[tuple[VmapInfo, tuple[Any, ...]]] = []

    def wrap(info: VmapInfo, in_dims: tuple[Any, ...], x: torch.Tensor, n: int) -> tuple[Any, ...]:
        seen.append((info, in_dims))
        return x.movedim(in_dims[0], 0), n

    op = register_vmap_op(
        lambda x, n: x * n,
        fake_fn=lambda x, n: torch.empty_like(x),
        vmap_fn=lambda x, n: x * n,
        fake_vmap_fn=lambda x, n: torch.empty_like(x),
        vmap_wrap_inputs=wrap,
        name=f"{ns}::wrapped",
        schema="(Tensor x, int n) -> Tensor",
    )
    x = torch.randn(3, 6)
    torch.testing.assert_close(vmap(op, in_dims=(1, None), randomness="same")(x, 2), (x * 2).t())
    assert seen == [(VmapInfo(6, "same"), (1, None))]


def test_max_vmap_level_caps_the_fast_rule(ns: str) -> None:
    def cumsum(x: torch.Tensor) -> torch.Tensor:
        return x.cumsum(-1)

    fake = lambda x: torch.empty_like(x)  # noqa: E731
    op = register_vmap_op(
        cumsum, fake_fn=fake, vmap_fn=cumsum, fake_vmap_fn=fake, max_vmap_level=2, name=f"{ns}::cs"
    )
    x = torch.randn(2, 3, 4, 5)
    torch.testing.assert_close(vmap(vmap(op))(x[0]), x[0].cumsum(-1))
    assert (op.vmap_stats.fast, op.vmap_stats.nested, op.vmap_stats.loop) == (1, 1, 0)
    op.vmap_stats.reset()
    torch.testing.assert_close(vmap(vmap(vmap(op)))(x), x.cumsum(-1))
    assert (op.vmap_stats.fast, op.vmap_stats.nested, op.vmap_stats.loop) == (1, 1, 1)


def test_without_vmap_fn_the_per_sample_loop_is_correct(ns: str) -> None:
    op = register_vmap_op(
        lambda x: x.sort().values,
        fake_fn=lambda x: torch.empty_like(x),
        name=f"{ns}::srt",
        schema="(Tensor x) -> Tensor",
    )
    x = torch.randn(2, 3, 5)
    torch.testing.assert_close(vmap(vmap(op))(x), x.sort().values)
    assert op.batched_overload is None


def test_op_without_batched_inputs_under_vmap(scaled_sum: Any) -> None:
    x, y = torch.randn(3), torch.randn(4)
    out = vmap(lambda z: scaled_sum(x, y, 1.0) + z)(torch.randn(2, 3))
    assert out.shape == (2, 3)
    assert scaled_sum.vmap_stats.fast == 0
