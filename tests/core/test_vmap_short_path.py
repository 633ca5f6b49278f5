"""The vmap short paths (the fold: ``vmap_fn`` called by the op's call, or by its vmap rule,
itself for every level at once; the twin: the batched op without its autograd kernel at the
last level) give exactly
what the dispatcher path gives, and are taken only where nothing needs the dispatcher.

Every case runs twice, with both switched off (``opreg_core._batching.short_path_enabled`` and
``nograd_op_enabled``) and on, and compares the outputs (and gradients) and the dispatch state
``vmap_fn`` ran in; ``vmap_fn`` records which path reached it, so a case that should take a
short path proves it did, and one that must not (grad, modes, subclasses, device kernels, fake
tensors) proves it did not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest
import torch
from torch.func import grad, vmap
from torch.utils._python_dispatch import TorchDispatchMode

import opreg_core._batching as batching
from opreg_core import register_vmap_op

FOLD, TWIN, FULL = "fold", "twin", "full"


def _path() -> str:
    """How ``vmap_fn`` (two frames up) was reached: by the fold (no dispatcher), by the rule
    that dispatched the batched op's twin without an autograd kernel, or by the batched op."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_name
        if name in {"_fold_and_call", "vmap_fold"}:  # the fold of n levels; of one
            return FOLD
        if name in {"op_rule", "_only_level", "batched_rule"}:
            rules = frame.f_locals["self"]
            op = frame.f_locals.get("op")
            return TWIN if op is not None and op is rules.nograd_op else FULL
        frame = frame.f_back
    return FULL  # not under a vmap rule (the per-sample loop): a plain call of the batched op


class Recorder:
    """Which path each ``vmap_fn`` call came from, and the dispatch state it ran in."""

    def __init__(self) -> None:
        self.short: list[str] = []
        self.state: list[tuple[bool, Any, Any]] = []

    def note(self) -> None:
        self.short.append(_path())
        self.state.append(
            (
                torch._C._are_functorch_transforms_active(),
                torch._C._dispatch_tls_local_include_set(),
                torch._C._dispatch_tls_local_exclude_set(),
            )
        )


@pytest.fixture(
    params=[
        "cpu",
        pytest.param(
            "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")
        ),
    ]
)
def device(request: pytest.FixtureRequest) -> str:
    """The device of a test's tensors (CUDA where there is one)."""
    return str(request.param)


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


@pytest.fixture
def short_path() -> Iterator[Callable[[bool], None]]:
    """``short_path(on)`` switches the short path; restored after the test."""
    saved = batching.short_path_enabled, batching.nograd_op_enabled

    def switch(on: bool) -> None:
        batching.short_path_enabled = batching.nograd_op_enabled = on

    yield switch
    batching.short_path_enabled, batching.nograd_op_enabled = saved


def both(
    short_path: Callable[[bool], None], rec: Recorder, run: Callable[[], Any]
) -> tuple[Any, list[str]]:
    """``run()`` with the short paths off, then on; asserts equal results (exactly) and equal
    dispatch states in ``vmap_fn``; returns the second run's result and the path of each of
    its ``vmap_fn`` calls."""
    short_path(False)
    rec.short.clear()
    rec.state.clear()
    torch.manual_seed(0)
    expected = run()
    assert set(rec.short) <= {FULL}, "the switches must turn the short paths off"
    states = list(rec.state)
    short_path(True)
    rec.short.clear()
    rec.state.clear()
    torch.manual_seed(0)
    got = run()
    taken = list(rec.short)
    _assert_same(got, expected)
    # vmap_fn ran in the same dispatch state (functorch levels, included and excluded keys).
    assert rec.state == states
    return got, taken


def _assert_same(got: Any, expected: Any) -> None:
    if isinstance(expected, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            _assert_same(g, e)
    elif isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor)
        assert got.shape == expected.shape and got.dtype == expected.dtype
        assert got.stride() == expected.stride() or not got.is_contiguous()
        if got.device.type != "meta" and not isinstance(got, torch._subclasses.FakeTensor):
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
    else:
        assert got == expected


def _add_op(ns: str, rec: Recorder, name: str = "add", **options: Any) -> Any:
    def vmap_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        rec.note()
        return x + y

    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return g, g

    return register_vmap_op(
        lambda x, y: x + y,
        fake_fn=lambda x, y: torch.empty_like(x),
        vmap_fn=vmap_fn,
        fake_vmap_fn=lambda x, y: torch.empty_like(x),
        backward=backward,
        name=f"{ns}::{name}",
        schema="(Tensor x, Tensor y) -> Tensor",
        **options,
    )


def _nest(fn: Any, depth: int, in_dims: tuple[Any, ...], **kwargs: Any) -> Any:
    for _ in range(depth):
        fn = vmap(fn, in_dims=in_dims, **kwargs)
    return fn


def _batched(shape: tuple[int, ...], depth: int, dim: int | None) -> torch.Tensor:
    """A tensor batched at ``dim`` (per level, counted in the per-level shape) ``depth`` times."""
    if dim is None:
        return torch.randn(shape)
    t = torch.randn(shape)
    for size in (2, 3, 4)[:depth]:
        per = t.dim() + 1
        d = dim % per
        t = torch.stack([t + i for i in range(size)], d)
    return t


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("x_dim", [0, 1, -1])
@pytest.mark.parametrize("y_dim", [None, 0, -2])
def test_same_results_at_every_depth_and_in_dims(
    ns: str,
    rec: Recorder,
    short_path: Any,
    device: str,
    depth: int,
    x_dim: int,
    y_dim: int | None,
) -> None:
    op = _add_op(ns, rec)
    x = _batched((5, 3), depth, x_dim).to(device)
    y = (_batched((5, 3), depth, y_dim) if y_dim is not None else torch.randn(5, 3)).to(device)
    f = _nest(op, depth, (x_dim, y_dim))
    out, taken = both(short_path, rec, lambda: f(x, y))
    assert taken == [FOLD]  # from the op's call, one level included
    plain = _nest(torch.add, depth, (x_dim, y_dim))(x, y)
    torch.testing.assert_close(out, plain)


@pytest.mark.parametrize(
    "level_dims",
    [((0, 0), (1, 0)), ((1, 0), (0, 0)), ((0, None), (-1, 0)), ((1, 1), (0, 0), (0, 1))],
    ids=["inner-1", "outer-1", "mixed", "depth3"],
)
def test_levels_with_different_in_dims(
    ns: str, rec: Recorder, short_path: Any, device: str, level_dims: tuple[Any, ...]
) -> None:
    # Per level a different batch dim (outermost level first): the fold flattens dims that
    # are not all in front through their positions, those all at 0 as they lie.
    op = _add_op(ns, rec)
    x, y = torch.randn(5, 3, device=device), torch.randn(5, 3, device=device)
    for size, (dx, dy) in zip((2, 3, 4), reversed(level_dims), strict=False):
        x = torch.stack([x + i for i in range(size)], dx % (x.dim() + 1))
        if dy is not None:
            y = torch.stack([y * (i + 1) for i in range(size)], dy % (y.dim() + 1))
    f, ref = op, torch.add
    for dims in reversed(level_dims):  # innermost level first
        f, ref = vmap(f, in_dims=dims), vmap(ref, in_dims=dims)
    out, taken = both(short_path, rec, lambda: f(x, y))
    assert taken == [FOLD]
    torch.testing.assert_close(out, ref(x, y))


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_vmap_fn_sees_the_same_dispatch_state_on_both_paths(
    ns: str, rec: Recorder, short_path: Any, device: str, depth: int
) -> None:
    """The state below the levels is derived from torch (a probe through the dispatcher); a
    torch release that changes what a vmap level does to it fails here."""
    op = _add_op(ns, rec)
    x, y = torch.randn(*(2,) * depth, 3, device=device), torch.randn(3, device=device)
    f = _nest(op, depth, (0, None))
    both(short_path, rec, lambda: f(x, y))
    ((active, _, excluded),) = rec.state
    assert not active
    for key in ("AutogradCPU", "AutogradCUDA", "ADInplaceOrView", "Conjugate", "Functionalize"):
        assert not excluded.has(getattr(torch._C.DispatchKey, key)), key


def test_the_level_keys_are_measured_from_torch_and_the_probe_leaves_nothing() -> None:
    from opreg_core._private import vmap_level_keys

    keys = vmap_level_keys()
    assert keys is not None, "the short path is off on this torch: the probe failed"
    excluded = torch._C.DispatchKeySet.from_raw_repr(keys.excluded)
    included = torch._C.DispatchKeySet.from_raw_repr(keys.included)
    assert excluded.has(torch._C.DispatchKey.AutogradCPU)
    assert included.has(torch._C.DispatchKey.FuncTorchVmapMode)
    assert not hasattr(torch.ops.opreg_level_probe, "probe")


def test_a_state_without_the_level_keys_takes_the_dispatcher_path() -> None:
    from opreg_core._private import vmap_level_keys

    keys = vmap_level_keys()
    assert keys is not None
    assert keys.state_below() is None  # not inside a vmap level: nothing to pop


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_kwargs(ns: str, rec: Recorder, short_path: Any, depth: int) -> None:
    def vmap_fn(x: torch.Tensor, *, y: torch.Tensor) -> torch.Tensor:
        rec.note()
        return x * y

    op = register_vmap_op(
        lambda x, *, y: x * y,
        fake_fn=lambda x, *, y: torch.empty_like(x),
        vmap_fn=vmap_fn,
        fake_vmap_fn=lambda x, *, y: torch.empty_like(x),
        name=f"{ns}::mul",
        schema="(Tensor x, *, Tensor y) -> Tensor",
    )
    x, y = torch.randn(*(2,) * depth, 3), torch.randn(*(2,) * depth, 3)
    f: Any = lambda a, b: op(a, y=b)  # noqa: E731
    for _ in range(depth):
        f = vmap(f)
    out, taken = both(short_path, rec, lambda: f(x, y))
    assert taken == [TWIN]  # kwargs are not folded: each level dispatches
    torch.testing.assert_close(out, x * y)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_list_arguments(ns: str, rec: Recorder, short_path: Any, depth: int) -> None:
    def vmap_fn(xs: list[torch.Tensor], y: torch.Tensor) -> torch.Tensor:
        rec.note()
        return xs[0] + xs[1] * y

    op = register_vmap_op(
        lambda xs, y: xs[0] + xs[1] * y,
        fake_fn=lambda xs, y: torch.empty_like(xs[0]),
        vmap_fn=vmap_fn,
        fake_vmap_fn=lambda xs, y: torch.empty_like(xs[0]),
        name=f"{ns}::lst",
        schema="(Tensor[] xs, Tensor y) -> Tensor",
    )
    a, b = torch.randn(*(2,) * depth, 3), torch.randn(*(2,) * depth, 3)
    y = torch.randn(3)
    f: Any = lambda p, q: op([p, q], y)  # noqa: E731
    for _ in range(depth):
        f = vmap(f)
    out, taken = both(short_path, rec, lambda: f(a, b))
    assert taken == [TWIN]  # lists are not folded: each level dispatches
    torch.testing.assert_close(out, a + b * y)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_out_dims_tuple(ns: str, rec: Recorder, short_path: Any, depth: int) -> None:
    def vmap_fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rec.note()
        return x * 2, (x + 1).movedim(0, -1)

    op = register_vmap_op(
        lambda x: (x * 2, x + 1),
        fake_fn=lambda x: (torch.empty_like(x), torch.empty_like(x)),
        vmap_fn=vmap_fn,
        fake_vmap_fn=lambda x: (torch.empty_like(x), torch.empty_like(x).movedim(0, -1)),
        vmap_out_dims=(0, -1),
        name=f"{ns}::two",
        schema="(Tensor x) -> (Tensor, Tensor)",
    )
    x = torch.randn(*(2,) * depth, 3)
    out, taken = both(short_path, rec, lambda: _nest(op, depth, (0,))(x))
    assert taken == [TWIN]  # two outputs are not folded
    torch.testing.assert_close(out[0], x * 2)
    torch.testing.assert_close(out[1], x + 1)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_one_output_batched_at_another_dim(
    ns: str, rec: Recorder, short_path: Any, depth: int
) -> None:
    # vmap_fn's output has the batch size in dims 0 and 1, its batch dim being 1: a rule that
    # assumed dim 0 would return the transpose.
    def vmap_fn(x: torch.Tensor) -> torch.Tensor:
        rec.note()
        return (x * 2).movedim(0, 1)

    op = register_vmap_op(
        lambda x: x * 2,
        fake_fn=lambda x: torch.empty_like(x),
        vmap_fn=vmap_fn,
        fake_vmap_fn=lambda x: torch.empty_like(x).movedim(0, 1),
        vmap_out_dims=(1,),
        name=f"{ns}::double",
        schema="(Tensor x) -> Tensor",
    )
    x = torch.randn(*(2,) * depth, 2**depth)  # per sample as long as the whole batch
    out, taken = both(short_path, rec, lambda: _nest(op, depth, (0,))(x))
    assert taken == [FOLD]  # from the op's call, one level included
    torch.testing.assert_close(out, x * 2)


@pytest.mark.parametrize("randomness", ["different", "same", "error"])
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_randomness(ns: str, rec: Recorder, short_path: Any, randomness: str, depth: int) -> None:
    """vmap_fn runs below every level on both paths: its random ops are not vmap's."""

    def vmap_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        rec.note()
        return x + y + torch.rand_like(x)

    op = register_vmap_op(
        lambda x, y: x + y + torch.rand_like(x),
        fake_fn=lambda x, y: torch.empty_like(x),
        vmap_fn=vmap_fn,
        fake_vmap_fn=lambda x, y: torch.empty_like(x),
        name=f"{ns}::noisy",
        schema="(Tensor x, Tensor y) -> Tensor",
    )
    x, y = torch.randn(*(2,) * depth, 3), torch.randn(3)
    f = _nest(op, depth, (0, None), randomness=randomness)
    _, taken = both(short_path, rec, lambda: f(x, y))
    assert taken == [FOLD]  # from the op's call, one level included


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_inputs_that_require_grad_take_the_dispatcher_path(
    ns: str, rec: Recorder, short_path: Any, device: str, depth: int
) -> None:
    op = _add_op(ns, rec)

    def run() -> tuple[torch.Tensor, ...]:
        x = torch.ones(*(2,) * depth, 3, requires_grad=True, device=device)
        y = torch.ones(3, requires_grad=True, device=device)
        out = _nest(op, depth, (0, None))(x, y)
        out.sum().backward()
        assert x.grad is not None and y.grad is not None
        return out.detach(), x.grad, y.grad

    _, taken = both(short_path, rec, run)
    assert taken == [FULL]
    # vmap(grad(op)): the grad level lowers the call to the vmap levels with its own wrappers
    # removed (nothing requires grad there), so the short path may run below them.
    x, y = torch.randn(*(2,) * depth, 3, device=device), torch.randn(3, device=device)
    g = grad(lambda a, b: op(a, b).sum(), argnums=1)
    out, taken = both(short_path, rec, lambda: _nest(g, depth, (0, None))(x, y))
    assert taken == [TWIN if depth == 1 else FOLD]  # by the vmap rules (the grad level is on top)
    torch.testing.assert_close(out, torch.full((*(2,) * depth, 3), 1.0, device=device))
    # grad(vmap(op)): a grad level below the vmap levels: the dispatcher decides.
    f = grad(lambda a, b: _nest(op, depth, (0, None))(a, b).sum(), argnums=1)
    out, taken = both(short_path, rec, lambda: f(x, y))
    assert taken == [FULL]
    torch.testing.assert_close(out, torch.full((3,), float(2**depth), device=device))


@pytest.mark.parametrize("middle", ["grad", "functionalize"])
def test_a_transform_between_vmap_levels_takes_the_dispatcher_path(
    ns: str, rec: Recorder, short_path: Any, middle: str
) -> None:
    # vmap(grad(vmap(op))) with every argument batched at both vmap levels: the fold infers
    # that every level is a vmap level from every level batching an argument; the level in
    # the middle batches none, so the dispatcher handles it, and the outer vmap level, the
    # last, calls the twin.
    op = _add_op(ns, rec)

    def per_sample(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if middle == "grad":
            return grad(lambda yy: vmap(op)(x, yy).sum())(y)
        return torch.func.functionalize(lambda yy: vmap(op)(x, yy))(y)

    x, y = torch.randn(2, 4, 3), torch.randn(2, 4, 3)
    out, taken = both(short_path, rec, lambda: vmap(per_sample)(x, y))
    assert taken == [TWIN]
    torch.testing.assert_close(out, torch.ones_like(y) if middle == "grad" else x + y)


def test_no_grad_and_inference_mode(ns: str, rec: Recorder, short_path: Any) -> None:
    op = _add_op(ns, rec)
    x, y = torch.randn(2, 3, requires_grad=True), torch.randn(3)
    with torch.no_grad():
        _, taken = both(short_path, rec, lambda: vmap(op, in_dims=(0, None))(x, y))
    assert taken == [FOLD]  # no graph is recorded: requires_grad does not matter
    with torch.inference_mode():
        xi, yi = torch.randn(2, 2, 3), torch.randn(3)
        _, taken = both(short_path, rec, lambda: _nest(op, 2, (0, None))(xi, yi))
    assert taken == [FULL]


def test_torch_compile(ns: str, rec: Recorder, short_path: Any, device: str) -> None:
    op = _add_op(ns, rec)
    x, y = torch.randn(2, 3, 4, device=device), torch.randn(4, device=device)

    def run() -> torch.Tensor:
        torch.compiler.reset()
        f = torch.compile(_nest(op, 2, (0, None)), backend="aot_eager", fullgraph=True)
        return f(x, y)

    out, taken = both(short_path, rec, run)
    torch.testing.assert_close(out, x + y)
    # Traced under fake tensors and modes: the graph holds the batched op; no short path.
    assert taken == [FULL]


def test_dispatch_mode_sees_the_batched_op(ns: str, rec: Recorder, short_path: Any) -> None:
    seen: list[str] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    op = _add_op(ns, rec)
    x, y = torch.randn(2, 2, 3), torch.randn(3)

    def run() -> torch.Tensor:
        with Record():
            out: torch.Tensor = _nest(op, 2, (0, None))(x, y)
        return out

    _, taken = both(short_path, rec, run)
    assert taken == [FULL]
    assert any("add_vmap" in name or "add_batched" in name for name in seen) or any(
        name.startswith(f"{ns}.") for name in seen
    ), seen


def test_fake_tensor_mode(ns: str, rec: Recorder, short_path: Any) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = _add_op(ns, rec)

    def run() -> torch.Tensor:
        with FakeTensorMode():
            x, y = torch.empty(2, 3, 4), torch.empty(4)
            out: torch.Tensor = _nest(op, 2, (0, None))(x, y)
        return out

    out, taken = both(short_path, rec, run)
    assert taken == []  # the fake of the batched op runs, not vmap_fn
    assert out.shape == (2, 3, 4)


class Tagged(torch.Tensor):
    """A tensor subclass that only passes through ``__torch_function__``."""


def test_tensor_subclass_takes_the_dispatcher_path(ns: str, rec: Recorder, short_path: Any) -> None:
    op = _add_op(ns, rec)
    x, y = torch.randn(2, 2, 3).as_subclass(Tagged), torch.randn(3)
    for depth in (1, 2):
        xd = x[0] if depth == 1 else x
        out, taken = both(
            short_path, rec, lambda xd=xd, depth=depth: _nest(op, depth, (0, None))(xd, y)
        )
        assert taken == [FULL]
        torch.testing.assert_close(out.as_subclass(torch.Tensor), xd.as_subclass(torch.Tensor) + y)


def test_a_device_kernel_takes_the_dispatcher_path(
    ns: str, rec: Recorder, short_path: Any, device: str
) -> None:
    op = _add_op(ns, rec)
    calls: list[tuple[int, ...]] = []

    def device_kernel(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        calls.append(tuple(x.shape))
        return x + y

    x, y = torch.randn(2, 3, 4, device=device), torch.randn(4, device=device)
    handle = op.register_kernel(device, device_kernel, batched=True)
    _, taken = both(short_path, rec, lambda: _nest(op, 2, (0, None))(x, y))
    assert taken == [] and calls == [(6, 4), (6, 4)]
    handle.remove()
    _, taken = both(short_path, rec, lambda: _nest(op, 2, (0, None))(x, y))
    assert taken == [FOLD]


def test_device_types_ops_take_the_dispatcher_path(
    ns: str, rec: Recorder, short_path: Any, device: str
) -> None:
    op = _add_op(ns, rec, device_types=(device,))
    x, y = torch.randn(2, 3, 4, device=device), torch.randn(4, device=device)
    _, taken = both(short_path, rec, lambda: _nest(op, 2, (0, None))(x, y))
    assert taken == [TWIN]  # a twin on the same device keys; no fold


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_max_vmap_level(ns: str, rec: Recorder, short_path: Any, depth: int) -> None:
    op = _add_op(ns, rec, max_vmap_level=2)
    x, y = torch.randn(*(2,) * depth, 3), torch.randn(3)
    out, taken = both(short_path, rec, lambda: _nest(op, depth, (0, None))(x, y))
    torch.testing.assert_close(out, x + y)
    # Within the cap the last level calls the twin (no fold: the cap counts levels); past it,
    # the outermost level loops per sample and calls the batched op below every level.
    assert taken == ([TWIN] if depth <= 2 else [FULL, FULL])
    assert op.vmap_stats.loop == (2 if depth == 3 else 0)  # one per run, both paths


def test_mutating_ops_take_the_dispatcher_path(ns: str, short_path: Any) -> None:
    def bump(x: torch.Tensor) -> None:
        x.add_(1)

    op = register_vmap_op(
        bump,
        fake_fn=lambda x: None,
        vmap_fn=bump,
        fake_vmap_fn=lambda x: None,
        name=f"{ns}::bump",
        schema="(Tensor(a!) x) -> ()",
        mutates_args=("x",),
    )
    for on in (False, True):
        short_path(on)
        x = torch.zeros(2, 3)
        version = x._version
        vmap(op, out_dims=None)(x)
        assert torch.equal(x, torch.ones(2, 3)) and x._version > version


def test_the_environment_variable_turns_the_short_path_off() -> None:
    code = "import opreg_core._batching as b; print(b.short_path_enabled)"
    env = {**os.environ, "OPREG_VMAP_SHORT_PATH": "0"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


def test_the_twins_name_is_reserved(ns: str) -> None:
    with pytest.raises(ValueError, match="__opreg_batched_nograd"):
        register_vmap_op(
            lambda x: x,
            fake_fn=lambda x: torch.empty_like(x),
            name=f"{ns}::f__opreg_batched_nograd",
        )


def test_nested_vmap_inside_a_functions_generated_vmap_rule(
    ns: str, rec: Recorder, short_path: Any
) -> None:
    """An autograd.Function's generated vmap rule runs its forward below the outer level (as
    ``interpreter.lower()``); a nested vmap of the op there folds with the same state."""
    op = _add_op(ns, rec)

    class Twice(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x: torch.Tensor, y: torch.Tensor) -> Any:
            return _nest(op, 2, (0, None))(x, y)

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            pass

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> Any:
            return g, None

    x, y = torch.randn(3, 2, 2, 4), torch.randn(4)
    out, taken = both(short_path, rec, lambda: vmap(Twice.apply, in_dims=(0, None))(x, y))
    assert taken == [FOLD]
    torch.testing.assert_close(out, x + y)


@pytest.mark.parametrize("probe", ["failed", "other keys"])
def test_without_trustworthy_level_keys_there_is_no_fold(
    ns: str, rec: Recorder, short_path: Any, monkeypatch: pytest.MonkeyPatch, probe: str
) -> None:
    """The probe failed (no keys: the fold is off for ops registered then), or the state at a
    level lacks keys the probe saw (``state_below`` refuses): the dispatcher path runs."""
    import opreg_core._private.vmap_short_paths as private

    keys = private.vmap_level_keys()
    assert keys is not None
    stale = private.VmapLevelKeys(keys.included, keys.excluded | 1 << 62)
    monkeypatch.setattr(private, "_LEVEL_KEYS", [None if probe == "failed" else stale])
    op = _add_op(ns, rec)
    x, y = torch.randn(2, 3, 4), torch.randn(4)
    out, taken = both(short_path, rec, lambda: _nest(op, 2, (0, None))(x, y))
    assert taken == [TWIN]  # the last level still skips the autograd kernel
    torch.testing.assert_close(out, x + y)


@pytest.mark.parametrize("depth", [1, 2])
def test_without_the_probe_seeing_the_callers_pop_the_call_does_not_fold(
    ns: str, rec: Recorder, short_path: Any, monkeypatch: pytest.MonkeyPatch, depth: int
) -> None:
    """The probe saw popping the levels at the caller's leave another state than functorch's
    below them: the op's call never folds; its vmap rules still take their short paths."""
    import opreg_core._private.vmap_short_paths as private

    keys = private.vmap_level_keys()
    assert keys is not None and keys.popped_is_below  # what this torch does
    other = private.VmapLevelKeys(keys.included, keys.excluded, popped_is_below=False)
    monkeypatch.setattr(private, "_LEVEL_KEYS", [other])
    op = _add_op(ns, rec)
    x, y = torch.randn(*(2,) * depth, 4), torch.randn(4)
    out, taken = both(short_path, rec, lambda: _nest(op, depth, (0, None))(x, y))
    assert taken == [TWIN if depth == 1 else FOLD]
    # ... by the op's batching rule, through the dispatcher (vmap_fn's callers say so):
    callers: list[set[str]] = []
    rec.note = lambda: callers.append(_callers())  # type: ignore[method-assign]
    _nest(op, depth, (0, None))(x, y)
    assert callers and all("op_rule" in c and "vmap_fold" not in c for c in callers), callers
    torch.testing.assert_close(out, x + y)


def _callers() -> set[str]:
    """The names of the functions on the stack above the caller."""
    names: set[str] = set()
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        names.add(frame.f_code.co_name)
        frame = frame.f_back
    return names
