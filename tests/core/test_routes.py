"""Which route each of a list of calls takes (``opreg_core._call_path``), printed as a table
(``pytest -s tests/core/test_routes.py``) and checked row by row against the route table of
that module's docstring."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from opreg_core import NotDifferentiableError, VmapOp, register_vmap_op
from opreg_core._call_path import ROUTES


def route_of(op: VmapOp[Any, Any], call: Callable[[], Any]) -> str:
    """The route ``call()`` (a call of ``op``) takes: the last route function the op's call
    hands it to (``vmap_fold`` then ``dispatcher`` where the fold did not apply),
    ``dispatcher`` when it goes to the operator's entry point, ``plain`` when it runs the
    kernel itself; ``entry point`` for an op whose call is the entry point."""
    path = op._state.call
    if path is op.overload._op:
        return "entry point"
    code = path.__code__
    cell = path.__closure__[code.co_freevars.index("entry")]
    entry = cell.cell_contents

    def dispatcher(*args: Any, **kwargs: Any) -> Any:
        return entry(*args, **kwargs)

    taken: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        back, name = frame.f_back, frame.f_code.co_name
        if event == "call" and back is not None and back.f_code is code and name in ROUTES:
            taken.append(name)

    cell.cell_contents = dispatcher
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
        cell.cell_contents = entry
    return taken[-1] if taken else "plain"


class _Mode(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


class _Sub(torch.Tensor):
    pass


def _ops(ns: str) -> dict[str, VmapOp[Any, Any]]:
    def scale(x: torch.Tensor, k: float) -> torch.Tensor:
        return x * k

    def add_(x: torch.Tensor, y: torch.Tensor) -> None:
        x.add_(y)

    def split(x: torch.Tensor) -> list[torch.Tensor]:
        return [x * 1, x * 2]

    fake = lambda x, k: torch.empty_like(x)  # noqa: E731
    ops = {
        "scale": register_vmap_op(scale, fake_fn=fake, name=f"{ns}::scale"),
        "cast": register_vmap_op(scale, fake_fn=fake, name=f"{ns}::cast", autocast="float32"),
        "nondiff": register_vmap_op(
            scale, fake_fn=fake, name=f"{ns}::nondiff", differentiable=False
        ),
        "nondiff_cpu": register_vmap_op(
            scale, fake_fn=fake, name=f"{ns}::nondiff_cpu", differentiable=False
        ),
        "cpu_kernel": register_vmap_op(scale, fake_fn=fake, name=f"{ns}::cpu_kernel"),
        "add_": register_vmap_op(
            add_, fake_fn=lambda x, y: None, name=f"{ns}::add_", mutates_args=("x",)
        ),
        "add_cpu": register_vmap_op(
            add_, fake_fn=lambda x, y: None, name=f"{ns}::add_cpu", mutates_args=("x",)
        ),
        "vmapped": register_vmap_op(
            scale, fake_fn=fake, name=f"{ns}::vmapped", vmap_fn=scale, fake_vmap_fn=fake
        ),
        "split": register_vmap_op(
            split, fake_fn=lambda x: [torch.empty_like(x)] * 2, name=f"{ns}::split"
        ),
    }
    for name in ("nondiff_cpu", "cpu_kernel"):
        ops[name].register_kernel("cpu", lambda x, k: x * k)
    ops["add_cpu"].register_kernel("cpu", add_)
    return ops


x = torch.ones(3)
xx = torch.ones(2, 3)
w = torch.ones(3, requires_grad=True)

#: (what the call is, op, the call, the route the module's table gives it)
CALLS: list[tuple[str, str, Callable[[Any], Any], str]] = [
    ("plain tensors, nothing requires grad", "scale", lambda op: op(x, 2.0), "plain"),
    ("an input requires grad", "scale", lambda op: op(w, 2.0), "recorded"),
    ("the same under no_grad", "scale", lambda op: _no_grad(op, w), "plain"),
    ("inference mode, one kernel everywhere", "scale", lambda op: _inference(op), "plain"),
    ("an int for a float", "scale", lambda op: op(x, 2), "dispatcher"),
    ("a positional argument by name", "scale", lambda op: op(x, k=2.0), "dispatcher"),
    ("a meta tensor", "scale", lambda op: op(x.to("meta"), 2.0), "dispatcher"),
    ("a tensor subclass", "scale", lambda op: op(x.as_subclass(_Sub), 2.0), "dispatcher"),
    ("under vmap, no vmap_fn", "scale", lambda op: _vmap(op, x), "dispatcher"),
    ("under vmap, with vmap_fn", "vmapped", lambda op: _vmap(op, x), "vmap_fold"),
    ("under vmap twice, with vmap_fn", "vmapped", lambda op: _vmap(op, xx, 2), "vmap_fold"),
    ("under vmap, an input requires grad", "vmapped", lambda op: _vmap(op, w), "dispatcher"),
    ("under grad, with vmap_fn", "vmapped", lambda op: _grad(op), "dispatcher"),
    ("in a TorchDispatchMode", "scale", lambda op: _in_mode(op), "dispatcher"),
    ("autocast region, op with a rule", "cast", lambda op: _autocast(op), "dispatcher"),
    ("autocast region, op without one", "scale", lambda op: _autocast(op), "plain"),
    ("device kernel, plain tensor", "cpu_kernel", lambda op: op(x, 2.0), "plain"),
    ("device kernel, input requires grad", "cpu_kernel", lambda op: op(w, 2.0), "recorded"),
    ("non-differentiable, one kernel", "nondiff", lambda op: op(x, 2.0), "plain"),
    ("non-differentiable, device kernel", "nondiff_cpu", lambda op: op(x, 2.0), "dispatcher"),
    ("in-place, one kernel", "add_", lambda op: op(x.clone(), x), "write_in_place"),
    ("in-place, written tensor requires grad", "add_", lambda op: _write_leaf(op), "dispatcher"),
    ("in-place, device kernel", "add_cpu", lambda op: op(x.clone(), x), "write_below"),
    ("returns a list (not covered)", "split", lambda op: op(x), "entry point"),
]


def _vmap(op: Any, t: torch.Tensor, depth: int = 1) -> Any:
    f = lambda t: op(t, 2.0)  # noqa: E731
    for _ in range(depth):
        f = torch.vmap(f)
    return f(t)


def _grad(op: Any) -> Any:
    try:  # the route is taken in the forward; the op has no backward to run
        return torch.func.grad(lambda t: op(t, 2.0).sum())(x)
    except NotDifferentiableError:
        return None


def _no_grad(op: Any, t: torch.Tensor) -> Any:
    with torch.no_grad():
        return op(t, 2.0)


def _inference(op: Any) -> Any:
    with torch.inference_mode():
        return op(torch.ones(3), 2.0)


def _in_mode(op: Any) -> Any:
    with _Mode():
        return op(x, 2.0)


def _autocast(op: Any) -> Any:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return op(x, 2.0)


def _write_leaf(op: Any) -> Any:
    leaf = torch.ones(3, requires_grad=True)
    try:
        return op(leaf, x)  # autograd refuses the write to a leaf: the dispatcher's error
    except RuntimeError:
        return None


def test_the_route_of_each_call(ns: str, capsys: pytest.CaptureFixture[str]) -> None:
    ops = _ops(ns)
    for _, name, call, _ in CALLS:
        call(ops[name])  # first calls run one-time checks; the routes are those of later ones
    rows = []
    for what, name, call, _ in CALLS:
        op = ops[name]
        rows.append((what, name, route_of(op, lambda op=op, call=call: call(op))))
    width = max(len(what) for what, _, _ in rows)
    with capsys.disabled():
        print(f"\n{'call':<{width}}  {'op':<11}  route")
        for what, name, route in rows:
            print(f"{what:<{width}}  {name:<11}  {route}")
    assert [route for _, _, route in rows] == [expected for *_, expected in CALLS]
