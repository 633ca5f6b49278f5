"""``vmap_fn`` called without the dispatcher (the fold of every vmap level into one call) or
through the batched op's twin without autograd kernel (one level) must see exactly what the
dispatcher would have given it: no functorch level, the caller's dispatch state, resolved
conjugate views, gradients where inputs need them, device kernels and modes respected.
(Ported from the first version of the short path; ``test_vmap_short_path.py`` compares both
paths case by case.)"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.func import grad, vmap

from opreg_core import register_vmap_op


def _op(ns: str, vmap_fn: Any, name: str = "f") -> Any:
    return register_vmap_op(
        lambda x, y: x + y,
        fake_fn=lambda x, y: torch.empty_like(x),
        vmap_fn=vmap_fn,
        fake_vmap_fn=lambda x, y: torch.empty_like(x),
        name=f"{ns}::{name}",
        schema="(Tensor x, Tensor y) -> Tensor",
    )


_LEVEL_KEYS = [
    "FuncTorchDynamicLayerFrontMode",
    "FuncTorchDynamicLayerBackMode",
    "FuncTorchGradWrapper",
    "FuncTorchVmapMode",
    "FuncTorchBatched",
    "Functionalize",
    "PythonTLSSnapshot",
    "ADInplaceOrView",
    "AutogradCPU",
    "AutogradOther",
    "Conjugate",
    "Negative",
    "ZeroTensor",
]


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_vmap_fn_runs_with_no_functorch_level_and_the_callers_dispatch_state(
    ns: str, depth: int
) -> None:
    seen: list[tuple[bool, Any, Any]] = []

    def vfn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        seen.append(
            (
                torch._C._are_functorch_transforms_active(),
                torch._C._dispatch_tls_local_include_set(),
                torch._C._dispatch_tls_local_exclude_set(),
            )
        )
        return x + y

    f: Any = _op(ns, vfn)
    for _ in range(depth):
        f = vmap(f, in_dims=(0, None))
    x, y = torch.randn(*[2] * depth, 3), torch.randn(3)
    torch.testing.assert_close(f(x, y), x + y)
    outside = torch._C._dispatch_tls_local_exclude_set()
    ((active, include, exclude),) = seen
    assert not active
    assert include == torch._C._dispatch_tls_local_include_set()
    for key in _LEVEL_KEYS:
        has = exclude.has(getattr(torch._C.DispatchKey, key))
        assert has == outside.has(getattr(torch._C.DispatchKey, key)), key
    assert (exclude - outside) | outside == exclude  # the caller's exclusions are kept
    for key in torch._C.DispatchKey.__members__:
        if key.startswith("Autocast"):
            assert exclude.has(getattr(torch._C.DispatchKey, key)), key


def test_random_ops_and_vmap_inside_vmap_fn(ns: str) -> None:
    """Random ops in vmap_fn are not vmap's (randomness="error" does not apply to them), and
    vmap_fn may start a vmap of its own."""

    def vfn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        noise = torch.rand_like(x) * 0
        return vmap(torch.add)(x, y) + noise

    op = _op(ns, vfn)
    x, y = torch.randn(4, 3), torch.randn(3)
    torch.testing.assert_close(vmap(op, in_dims=(0, None), randomness="error")(x, y), x + y)


def test_conjugate_and_negative_views_are_resolved(ns: str) -> None:
    op = _op(ns, lambda x, y: x * y)
    x = torch.randn(4, 3, dtype=torch.cfloat)
    y = torch.randn(3, dtype=torch.cfloat)
    for view in (x.conj(), torch._neg_view(x)):
        torch.testing.assert_close(
            vmap(op, in_dims=(0, None))(view, y), view.resolve_conj().resolve_neg() * y
        )


def test_inputs_that_need_grad_still_get_gradients(ns: str) -> None:
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return g, g

    op = register_vmap_op(
        lambda x, y: x + y,
        fake_fn=lambda x, y: torch.empty_like(x),
        vmap_fn=lambda x, y: x + y,
        fake_vmap_fn=lambda x, y: torch.empty_like(x),
        backward=backward,
        name=f"{ns}::g",
        schema="(Tensor x, Tensor y) -> Tensor",
    )
    x = torch.randn(4, 3, requires_grad=True)
    y = torch.randn(3)
    vmap(op, in_dims=(0, None))(x, y).sum().backward()
    torch.testing.assert_close(x.grad, torch.ones(4, 3))
    gy = vmap(grad(lambda a, b: op(a, b).sum(), argnums=1), in_dims=(0, None))(x.detach(), y)
    torch.testing.assert_close(gy, torch.ones(4, 3))


def test_a_registered_batched_kernel_is_used(ns: str) -> None:
    op = _op(ns, lambda x, y: x + y)
    calls: list[int] = []

    def cpu_kernel(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        calls.append(x.shape[0])
        return x + y

    handle = op.register_kernel("cpu", cpu_kernel, batched=True)
    x, y = torch.randn(4, 3), torch.randn(3)
    torch.testing.assert_close(vmap(op, in_dims=(0, None))(x, y), x + y)
    assert calls == [4]
    handle.remove()
    torch.testing.assert_close(vmap(op, in_dims=(0, None))(x, y), x + y)
    assert calls == [4]


def test_dispatch_modes_still_see_the_batched_op(ns: str) -> None:
    from torch.utils._python_dispatch import TorchDispatchMode

    op = _op(ns, lambda x, y: x + y)
    seen: list[str] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    x, y = torch.randn(4, 3), torch.randn(3)
    with Record():
        torch.testing.assert_close(vmap(op, in_dims=(0, None))(x, y), x + y)
    assert any(
        name.startswith(f"{ns}.f_") or f"{ns}::f_" in name or "f_vmap" in name for name in seen
    ), seen


def test_nested_levels_fold_into_one_call_unless_a_level_batches_no_argument(ns: str) -> None:
    calls: list[tuple[int, ...]] = []

    def vfn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        calls.append(tuple(x.shape))
        return x + y

    op = _op(ns, vfn)
    x, y, z = torch.randn(3, 4, 2), torch.randn(4, 2), torch.randn(5)
    # The inner level batches only z, which the op does not take: that level passes it down.
    out = vmap(lambda a: vmap(lambda c: op(a, y) + c.sum() * 0)(z))(x)
    torch.testing.assert_close(out, (x + y).unsqueeze(1).expand(3, 5, 4, 2))
    assert calls == [(3, 4, 2)]
    calls.clear()
    x4 = torch.randn(3, 4, 6, 2)
    out = vmap(vmap(op, in_dims=(1, None)), in_dims=(0, None))(x4, y)
    assert calls == [(18, 4, 2)], "both levels in one call, the outer one first"
    torch.testing.assert_close(out, x4.permute(0, 2, 1, 3) + y)
