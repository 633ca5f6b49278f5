"""Many signatures work in eager, under vmap and under compile (fake tensors)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.func import vmap

from opreg_core import register_vmap_op


def _int_str_bool(x: torch.Tensor, n: int, mode: str, flag: bool, eps: float = 0.5) -> torch.Tensor:
    y = x * n + eps
    if mode == "neg":
        y = -y
    return y.abs() if flag else y


def _optional(x: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
    return x.clone() if w is None else x * w


def _tensor_list_out(x: torch.Tensor) -> list[torch.Tensor]:
    return [x + 1, x * 2]


def _two_outputs(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x + y, x - y


def _int_list(x: torch.Tensor, dims: list[int]) -> torch.Tensor:
    return x.sum(dims)


def _like(*args: Any, **kwargs: Any) -> Any:
    """A fake that runs the function on meta-compatible ops: these bodies are pure torch."""
    raise NotImplementedError


CASES: list[
    tuple[str, Callable[..., Any], Callable[..., Any], tuple[Any, ...], tuple[Any, ...]]
] = [
    (
        "int_str_bool",
        _int_str_bool,
        lambda x, n, mode, flag, eps=0.5: torch.empty_like(x),
        (torch.randn(3), 2, "neg", True),
        (0, None, None, None),
    ),
    ("optional_none", _optional, lambda x, w=None: torch.empty_like(x), (torch.randn(3),), (0,)),
    (
        "optional_given",
        _optional,
        lambda x, w=None: torch.empty_like(x),
        (torch.randn(3), torch.randn(3)),
        (0, None),
    ),
    (
        "tensor_list_out",
        _tensor_list_out,
        lambda x: [torch.empty_like(x), torch.empty_like(x)],
        (torch.randn(3),),
        (0,),
    ),
    (
        "two_outputs",
        _two_outputs,
        lambda x, y: (torch.empty_like(x), torch.empty_like(x)),
        (torch.randn(3), torch.randn(3)),
        (0, 0),
    ),
    (
        "int_list",
        _int_list,
        lambda x, dims: x.new_empty(x.shape[0]),
        (torch.randn(3, 4, 5), [1, 2]),
        (0, None),
    ),
]


@pytest.mark.parametrize(
    ("fn", "fake", "args", "in_dims"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_signature_in_eager_vmap_and_compile(
    ns: str,
    fn: Callable[..., Any],
    fake: Callable[..., Any],
    args: tuple[Any, ...],
    in_dims: tuple[Any, ...],
) -> None:
    op = register_vmap_op(fn, fake_fn=fake, name=f"{ns}::{fn.__name__.strip('_')}")
    expected = fn(*args)
    torch.testing.assert_close(op(*args), expected)
    batched = tuple(
        torch.stack([a, a * 2]) if d == 0 else a for a, d in zip(args, in_dims, strict=True)
    )
    looped = [
        fn(*(b[i] if d == 0 else b for b, d in zip(batched, in_dims, strict=True)))
        for i in range(2)
    ]
    out = vmap(op, in_dims=in_dims)(*batched)
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(out, torch.stack(looped))
    else:
        for k, o in enumerate(out):
            torch.testing.assert_close(o, torch.stack([r[k] for r in looped]))
    torch._dynamo.reset()
    compiled = torch.compile(op, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(*args), expected)
    result = torch.library.opcheck(op, args)
    assert set(result.values()) == {"SUCCESS"}


def test_mutating_op(ns: str) -> None:
    def add_(x: torch.Tensor, y: torch.Tensor) -> None:
        x.add_(y)

    def add_batched(x: torch.Tensor, y: torch.Tensor) -> None:
        x.add_(y)

    op = register_vmap_op(
        add_,
        fake_fn=lambda x, y: None,
        vmap_fn=add_batched,
        fake_vmap_fn=lambda x, y: None,
        mutates_args=["x"],
        name=f"{ns}::add_",
    )
    assert op.schema == "(Tensor(a0!) x, Tensor y) -> ()"
    x, y = torch.zeros(3), torch.ones(3)
    version = x._version
    op(x, y)
    assert torch.equal(x, torch.ones(3)) and x._version > version
    X = torch.zeros(4, 3)
    vmap(op, in_dims=(0, None), out_dims=None)(X, y)
    assert torch.equal(X, torch.ones(4, 3))
    result = torch.library.opcheck(op, (torch.zeros(3), torch.ones(3)))
    assert set(result.values()) == {"SUCCESS"}


def test_explicit_schema(ns: str) -> None:
    op = register_vmap_op(
        lambda x, k: x * k,
        fake_fn=lambda x, k: torch.empty_like(x),
        schema="(Tensor x, float k) -> Tensor",
        name=f"{ns}::scale",
    )
    torch.testing.assert_close(op(torch.ones(2), 3.0), torch.full((2,), 3.0))
