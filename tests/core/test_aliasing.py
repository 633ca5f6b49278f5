"""An op whose kernel returns an input, a view of one, or a view of another output fails at its
first eager call with an error naming the op, the output and the input; correct ops (new
outputs, however computed) run as before."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch

from opreg_core import register_vmap_op


def _empty_like(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _first_row(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[1:])


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.numel())


def _transposed(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[::-1])


def _pair(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), x.new_empty(x.numel())


def _listed(x: torch.Tensor) -> list[torch.Tensor]:
    return [torch.empty_like(x), x.new_empty(x.shape[1:])]


#: (fallback, schema, fake, the message's output and input): each returns an alias.
ALIASING: dict[str, tuple[Callable[..., Any], str, Callable[..., Any], str, str]] = {
    "the input itself": (lambda x: x, "(Tensor x) -> Tensor", _empty_like, "output 0", "x"),
    "x.view(-1)": (lambda x: x.view(-1), "(Tensor x) -> Tensor", _flat, "output 0", "x"),
    "x[0]": (lambda x: x[0], "(Tensor x) -> Tensor", _first_row, "output 0", "x"),
    "x.t()": (lambda x: x.t(), "(Tensor x) -> Tensor", _transposed, "output 0", "x"),
    "x.detach()": (lambda x: x.detach(), "(Tensor x) -> Tensor", _empty_like, "output 0", "x"),
    "second of a tuple": (
        lambda x: (x.sin(), x.view(-1)),
        "(Tensor x) -> (Tensor, Tensor)",
        _pair,
        "output 1",
        "x",
    ),
    "element of a list": (
        lambda x: [x.sin(), x[1]],
        "(Tensor x) -> Tensor[]",
        _listed,
        r"output 0\[1\]",
        "x",
    ),
    "an element of a list input": (
        lambda xs: xs[1].view(-1),
        "(Tensor[] xs) -> Tensor",
        lambda xs: xs[1].new_empty(xs[1].numel()),
        "output 0",
        r"xs\[1\]",
    ),
    "a keyword-only input": (
        lambda x, *, y: y[0],
        "(Tensor x, *, Tensor y) -> Tensor",
        lambda x, *, y: y.new_empty(y.shape[1:]),
        "output 0",
        "y",
    ),
    "a mutated input, undeclared": (
        lambda x: x.add_(1),
        "(Tensor(a!) x) -> Tensor",
        _empty_like,
        "output 0",
        "x",
    ),
}


def _register(ns: str, fn: Callable[..., Any], schema: str, fake: Callable[..., Any]) -> Any:
    mutates = ["x"] if "!" in schema else []
    return register_vmap_op(fn, name=f"{ns}::op", schema=schema, fake_fn=fake, mutates_args=mutates)


def _call(op: Any, schema: str) -> Any:
    x = torch.randn(3, 2)
    if "Tensor[] xs" in schema:
        return op([x, x.cos()])
    if "*, Tensor y" in schema:
        return op(x, y=x.cos())
    return op(x)


@pytest.mark.parametrize("case", ALIASING.values(), ids=ALIASING.keys())
def test_an_aliasing_output_fails_at_the_first_call(ns: str, case: tuple[Any, ...]) -> None:
    fn, schema, fake, output, name = case
    op = _register(ns, fn, schema, fake)
    message = rf"opreg: {ns}::op: {output} of the function aliases input '{name}' \(a view"
    with pytest.raises(RuntimeError, match=message):
        _call(op, schema)


def test_outputs_aliasing_each_other_fail(ns: str) -> None:
    def twice(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x.sin()
        return y, y.view(-1)

    op = register_vmap_op(twice, name=f"{ns}::twice", fake_fn=_pair)
    with pytest.raises(
        RuntimeError, match=rf"{ns}::twice: output 1 of the function aliases output 0"
    ):
        op(torch.randn(3, 2))


def test_non_differentiable_op_and_vmap_fn_are_checked(ns: str) -> None:
    op = register_vmap_op(
        lambda x: x.view(-1),
        name=f"{ns}::nondiff",
        schema="(Tensor x) -> Tensor",
        fake_fn=_flat,
        differentiable=False,
    )
    with pytest.raises(RuntimeError, match=rf"{ns}::nondiff: output 0 of the function aliases"):
        op(torch.randn(3, 2))

    batched = register_vmap_op(
        lambda x: x.sin(),
        name=f"{ns}::batched",
        schema="(Tensor x) -> Tensor",
        fake_fn=_empty_like,
        vmap_fn=lambda x: x,
        fake_vmap_fn=_empty_like,
    )
    torch.testing.assert_close(batched(torch.zeros(2)), torch.zeros(2))
    calls: list[Callable[[], Any]] = [
        lambda: torch.vmap(batched)(torch.randn(4, 2)),  # the batched op's twin (no grad)
        lambda: torch.vmap(batched)(torch.randn(4, 2, requires_grad=True)),  # the batched op
        lambda: torch.vmap(torch.vmap(batched))(torch.randn(3, 4, 2)),  # the fold
    ]
    for call in calls:
        with pytest.raises(
            RuntimeError, match=rf"{ns}::batched: output 0 of vmap_fn aliases input 'x'"
        ):
            call()


def test_register_kernel_kernels_are_checked(ns: str) -> None:
    op = register_vmap_op(
        lambda x: x * 2,
        name=f"{ns}::kernel",
        schema="(Tensor x) -> Tensor",
        fake_fn=_empty_like,
        vmap_fn=lambda x: x * 2,
        fake_vmap_fn=_empty_like,
    )
    x = torch.randn(3, 2)
    torch.testing.assert_close(op(x), x * 2)  # the fallback passes its first call
    op.register_kernel("cpu", lambda x: x.mul_(2))
    with pytest.raises(RuntimeError, match=rf"{ns}::kernel: output 0 of the cpu kernel aliases"):
        op(torch.randn(3, 2))
    op.register_kernel("cpu", lambda x: x[:, 0], batched=True)
    with pytest.raises(RuntimeError, match=r"output 0 of the cpu kernel \(batched\) aliases"):
        torch.vmap(op)(torch.randn(4, 3, 2))


# -- correct ops: new outputs, whatever they were computed from -----------------------------------

CORRECT: dict[str, tuple[Callable[..., Any], str, Callable[..., Any], torch.Tensor]] = {
    "a new tensor": (lambda x: x * 2, "(Tensor x) -> Tensor", _empty_like, torch.randn(3, 2)),
    "computed from a view": (
        lambda x: x.view(-1).sin(),
        "(Tensor x) -> Tensor",
        _flat,
        torch.randn(3, 2),
    ),
    "a contiguous copy of a transposed view": (
        lambda x: x.t().contiguous(),
        "(Tensor x) -> Tensor",
        _transposed,
        torch.randn(3, 2),
    ),
    "a row times two": (lambda x: x[0] * 2, "(Tensor x) -> Tensor", _first_row, torch.randn(3, 2)),
    "0 elements from a mask": (
        lambda x: x[x > 1e9],
        "(Tensor x) -> Tensor",
        lambda x: x.new_empty(0),
        torch.randn(3, 2),
    ),
    "0 elements from 0 elements": (
        lambda x: x.sin(),
        "(Tensor x) -> Tensor",
        _empty_like,
        torch.empty(0, 2),
    ),
    "a tuple of new tensors": (
        lambda x: (x.sin(), x.cos().view(-1)),
        "(Tensor x) -> (Tensor, Tensor)",
        _pair,
        torch.randn(3, 2),
    ),
    "a list of new tensors": (
        lambda x: [x.sin(), x[1].clone()],
        "(Tensor x) -> Tensor[]",
        _listed,
        torch.randn(3, 2),
    ),
}


@pytest.mark.parametrize("case", CORRECT.values(), ids=CORRECT.keys())
def test_new_outputs_pass(ns: str, case: tuple[Any, ...]) -> None:
    fn, schema, fake, x = case
    op = register_vmap_op(fn, name=f"{ns}::ok", schema=schema, fake_fn=fake)
    for _ in range(2):
        torch.testing.assert_close(op(x), fn(x))


def test_mutating_op_returning_nothing_passes(ns: str) -> None:
    def bump(x: torch.Tensor) -> None:
        x.add_(1)

    op = register_vmap_op(bump, name=f"{ns}::bump", fake_fn=lambda x: None, mutates_args=["x"])
    x = torch.zeros(3)
    op(x)
    op(x)
    torch.testing.assert_close(x, torch.full((3,), 2.0))


def test_a_declared_output_alias_is_refused_at_registration(ns: str) -> None:
    """An in-place op whose schema returns its mutated input (``-> Tensor(a!)``) is refused when
    registered, naming the op and the output: outputs are always new tensors, so the first-call
    check needs no exemption."""
    with pytest.raises(ValueError, match=rf"opreg: {ns}::add_one_: output 0 has an alias"):
        register_vmap_op(
            lambda x: x.add_(1),
            name=f"{ns}::add_one_",
            schema="(Tensor(a!) x) -> Tensor(a!)",
            fake_fn=lambda x: x,
            mutates_args=["x"],
        )


def test_the_error_says_what_to_do(ns: str) -> None:
    op = register_vmap_op(
        lambda x: x.view(-1), name=f"{ns}::v", schema="(Tensor x) -> Tensor", fake_fn=_flat
    )
    with pytest.raises(RuntimeError) as caught:
        op(torch.randn(2, 2))
    assert re.search(r"return a new tensor, e\.g\. x\.clone\(\)", str(caught.value))
    assert "torch.compile and functionalization" in str(caught.value)
