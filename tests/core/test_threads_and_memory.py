"""Concurrency and memory: ops registered and called from many threads; nothing kept alive."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch.func import grad, vmap

from opreg_core import register_vmap_op, registered_ops


def _register_scale(name: str, k: float) -> Any:
    def scale(x: torch.Tensor) -> torch.Tensor:
        return x * k

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        pass

    return register_vmap_op(
        scale,
        fake_fn=lambda x: torch.empty_like(x),
        vmap_fn=scale,
        fake_vmap_fn=lambda x: torch.empty_like(x),
        backward=lambda ctx, g: g * k,
        setup_context=setup,
        name=name,
    )


def test_registering_from_many_threads(ns: str) -> None:
    barrier = threading.Barrier(8)

    def work(i: int) -> Any:
        barrier.wait()
        own = _register_scale(f"{ns}::own_{i}", float(i))
        shared = _register_scale(f"{ns}::shared", 2.0)  # the same name from every thread
        return own, shared

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(8)))
    x = torch.ones(3)
    for i, (own, _) in enumerate(results):
        torch.testing.assert_close(own(x), x * i)
    shared = [op for op in registered_ops() if op.qualname == f"{ns}::shared"]
    assert len(shared) == 1
    for _, handle in results:  # every handle, old or new, calls the one live definition
        torch.testing.assert_close(handle(x), x * 2)
        torch.testing.assert_close(vmap(handle)(torch.ones(2, 3)), torch.full((2, 3), 2.0))


def test_calling_from_eight_threads(ns: str) -> None:
    op = _register_scale(f"{ns}::scale", 3.0)
    barrier = threading.Barrier(8)
    kinds: list[Callable[[torch.Tensor], torch.Tensor]] = [
        lambda x: op(x),
        lambda x: vmap(op)(x),
        lambda x: vmap(vmap(op))(x.reshape(1, *x.shape)),
        lambda x: grad(lambda y: op(y).sum())(x),
    ]
    expected = [
        lambda x: x * 3,
        lambda x: x * 3,
        lambda x: (x * 3).reshape(1, *x.shape),
        lambda x: torch.full_like(x, 3.0),
    ]

    def work(i: int) -> int:
        barrier.wait()
        bad = 0
        for j in range(200):
            x = torch.randn(4, 5)
            k = (i + j) % len(kinds)
            bad += not torch.allclose(kinds[k](x), expected[k](x))
        return bad

    with ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(work, range(8))) == 0


def test_no_reference_keeps_inputs_or_outputs_alive(ns: str) -> None:
    op = _register_scale(f"{ns}::scale", 2.0)
    gc.collect()
    gc.disable()  # prove that plain reference counting frees everything
    try:
        for call in (
            lambda x: op(x),
            lambda x: vmap(vmap(op))(x),
            lambda x: grad(lambda y: op(y).sum())(x),
        ):
            x = torch.randn(2, 3, 4)
            out = call(x)
            refs = [weakref.ref(x), weakref.ref(out)]
            del x, out
            assert all(r() is None for r in refs)
        x = torch.randn(3, requires_grad=True)
        out = op(x)
        out.sum().backward()
        refs = [weakref.ref(x), weakref.ref(out)]
        del x, out
        assert all(r() is None for r in refs)
    finally:
        gc.enable()
