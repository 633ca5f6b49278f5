"""torch.compile (no graph breaks), torch.export and torch.library.opcheck on registered ops."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.func import vmap

from opreg_core import register_vmap_op, unregister

OPCHECK_UTILS = (
    "test_schema",
    "test_autograd_registration",
    "test_faketensor",
    "test_aot_dispatch_dynamic",
)


def _fake(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(*inputs)


def _backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = ctx.saved_tensors
    return g * y, g * x


def _mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * y


@pytest.fixture(scope="module")
def ops() -> Iterator[dict[str, Any]]:
    made = {
        "backward": register_vmap_op(
            _mul,
            fake_fn=_fake,
            vmap_fn=_mul,
            fake_vmap_fn=_fake,
            backward=_backward,
            setup_context=_setup,
            name="opreg_core_test_compile::mul_bw",
        ),
        "no_backward": register_vmap_op(
            _mul,
            fake_fn=_fake,
            vmap_fn=_mul,
            fake_vmap_fn=_fake,
            name="opreg_core_test_compile::mul_nobw",
        ),
        "non_differentiable": register_vmap_op(
            _mul,
            fake_fn=_fake,
            vmap_fn=_mul,
            fake_vmap_fn=_fake,
            differentiable=False,
            name="opreg_core_test_compile::mul_nd",
        ),
        "no_vmap": register_vmap_op(
            _mul, fake_fn=_fake, name="opreg_core_test_compile::mul_novmap"
        ),
    }
    yield made
    for op in made.values():
        unregister(op.qualname)


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    torch._dynamo.reset()


@pytest.mark.parametrize("kind", ["backward", "no_backward", "non_differentiable", "no_vmap"])
def test_opcheck_all_default_utils(ops: dict[str, Any], kind: str) -> None:
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    for args in ((x, y), (x.requires_grad_(kind == "backward"), y)):
        result = torch.library.opcheck(ops[kind], args, test_utils=OPCHECK_UTILS)
        assert set(result.values()) == {"SUCCESS"}, result


@pytest.mark.parametrize("kind", ["backward", "non_differentiable"])
def test_compile_fullgraph_matches_eager(ops: dict[str, Any], kind: str) -> None:
    op = ops[kind]
    x, y = torch.randn(3, 4), torch.randn(4)

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return op(a, b.expand_as(a)).sin() + vmap(op, in_dims=(0, None))(a, b)

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x, y), f(x, y))


def test_compile_nested_vmap_and_dynamic_shapes(ops: dict[str, Any]) -> None:
    op = ops["backward"]

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return vmap(vmap(op, in_dims=(0, None)), in_dims=(0, None))(a, b)

    compiled = torch.compile(f, fullgraph=True, dynamic=True, backend="aot_eager")
    for n in (2, 5):
        a, b = torch.randn(n, 3, 4), torch.randn(4)
        torch.testing.assert_close(compiled(a, b), f(a, b))


def test_compile_backward_through_op(ops: dict[str, Any]) -> None:
    op = ops["backward"]
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    y = torch.randn(5, dtype=torch.float64)
    compiled = torch.compile(
        lambda a, b: op(a, b).pow(2).sum(), fullgraph=True, backend="aot_eager"
    )
    (gx,) = torch.autograd.grad(compiled(x, y), x)
    torch.testing.assert_close(gx, 2 * x.detach() * y * y)


@pytest.mark.parametrize("route", ["op", "overload", "vmap"])
def test_compiled_autograd_compiles_the_ops_backward(ops: dict[str, Any], route: str) -> None:
    """Compiled autograd (a training step's backward under ``torch.compile``) traces the
    graph that eager recorded through the op: its nodes give the key compiled autograd asks
    for, on the direct route, through the dispatcher and under vmap, before and after the
    direct route's Function settles."""
    op = ops["backward"]
    graphs: list[Any] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    fn = {"op": op, "overload": op.overload, "vmap": vmap(op)}[route]
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    y = torch.randn(3, 4, dtype=torch.float64)
    for _ in range(3):
        x.grad = None
        out = fn(x, y)
        with torch._dynamo.compiled_autograd._enable(torch.compile(backend=backend)):
            out.pow(2).sum().backward()
        torch.testing.assert_close(x.grad, 2 * x.detach() * y * y)
    assert graphs, "the backward was not compiled"


def test_compile_with_inductor_cpu(ops: dict[str, Any]) -> None:
    op = ops["no_backward"]
    x, y = torch.randn(8), torch.randn(8)
    compiled = torch.compile(lambda a, b: op(a, b) + 1, fullgraph=True)
    torch.testing.assert_close(compiled(x, y), x * y + 1)


def test_export_keeps_the_op(ops: dict[str, Any]) -> None:
    op = ops["backward"]

    class M(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return op(a, b) * 2

    x, y = torch.randn(3), torch.randn(3)
    exported = torch.export.export(M(), (x, y))
    targets = [n.target for n in exported.graph.nodes if n.op == "call_function"]
    assert op.overload in targets
    torch.testing.assert_close(exported.module()(x, y), x * y * 2)
