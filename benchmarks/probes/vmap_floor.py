"""The least a Python batching rule can cost under ``torch.vmap`` (issue #14, part 2).

    python benchmarks/probes/vmap_floor.py

An operator whose ``FuncTorchBatched`` kernel is the smallest correct Python rule for an
element-wise add of two arguments, the first batched at dim 0 (unwrap both, expand the
second to the batch if it is shared, as opreg's contract for ``vmap_fn`` does, call the
operator's batched twin one level down, wrap the output; no argument checks, no autograd
kernel) against ``torch.vmap`` of the plain function and an opreg op (default and
``differentiable=False``), depth 1, batch 64 of 8 floats, the second argument batched at dim 0
or shared (in_dims None). Best of 7 runs of 5000 calls, twice. Whatever opreg's rule does
beyond this rule's work (in_dims other than 0, lists, kwargs, output checks, modes, autograd)
is above this floor.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch._C import _functorch
from torch.func import vmap

from opreg_core import register_vmap_op

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: bench_core
from bench_core import best_us


def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


def minimal_rule_op() -> Callable[..., Any]:
    """``add`` as a bare Library operator with the smallest Python batching rule."""
    lib = torch.library.Library("vmap_floor", "FRAGMENT")  # type: ignore[no-untyped-call]
    lib.define("add(Tensor a, Tensor b) -> Tensor")  # type: ignore[no-untyped-call]
    lib.define("add_batched(Tensor a, Tensor b) -> Tensor")  # type: ignore[no-untyped-call]
    op = torch.ops.vmap_floor.add.default
    batched = torch.ops.vmap_floor.add_batched.default
    excluded = torch._C.DispatchKeySet(torch._C.DispatchKey.FuncTorchBatched)

    def rule(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        level = _functorch.maybe_get_level(a)
        ua, _ = _functorch._unwrap_batched(a, level)
        ub, db = _functorch._unwrap_batched(b, level)
        if db is None:  # b shared by the samples: expanded to the batch, as opreg's contract
            ub = ub.expand(ua.shape[0], *ub.shape)
        with torch._C._ExcludeDispatchKeyGuard(excluded):  # one level down
            out = batched(ua, ub)
        return _functorch._add_batch_dim(out, 0, level)

    for name in ("add", "add_batched"):
        lib.impl(name, add, "CompositeExplicitAutograd")  # type: ignore[no-untyped-call]
        lib.impl(name, torch.library.fallthrough_kernel, "Autograd")  # type: ignore[no-untyped-call]
    lib.impl("add", rule, "FuncTorchBatched")  # type: ignore[no-untyped-call]
    minimal_rule_op.lib = lib  # type: ignore[attr-defined]  # keep the library alive
    return op


def main() -> None:
    ops: dict[str, Callable[..., Any]] = {
        "minimal Python rule": minimal_rule_op(),
        "opreg default": register_vmap_op(
            add, name="vmap_floor_opreg::add", fake_fn=add, vmap_fn=add, fake_vmap_fn=add
        ),
        "opreg differentiable=False": register_vmap_op(
            add,
            name="vmap_floor_opreg::add_nd",
            fake_fn=add,
            vmap_fn=add,
            fake_vmap_fn=add,
            differentiable=False,
        ),
    }
    for in_dims in ((0, 0), (0, None)):
        print(f"in_dims={in_dims}:")
        compare(ops, in_dims)


def compare(ops: dict[str, Callable[..., Any]], in_dims: tuple[int, int | None]) -> None:
    """Print each op's time under ``vmap(in_dims=in_dims)`` against the plain function's."""
    x = torch.randn(64, 8)
    y = torch.randn(64, 8) if in_dims[1] == 0 else torch.randn(8)
    plain = vmap(add, in_dims=in_dims)
    contenders = {name: vmap(op, in_dims=in_dims) for name, op in ops.items()}
    for fn in contenders.values():
        torch.testing.assert_close(fn(x, y), x + y)
    for _ in range(2):
        base = best_us(lambda: plain(x, y))
        cells = [f"plain vmap {base:.1f} us"]
        for name, fn in contenders.items():
            us = best_us(lambda fn=fn: fn(x, y))  # type: ignore[misc]
            cells.append(f"{name} {us:.1f} us ({us / base:.2f}x)")
        print(", ".join(cells))


if __name__ == "__main__":
    main()
