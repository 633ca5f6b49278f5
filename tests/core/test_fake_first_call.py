"""A wrong fake fails at the first eager call of each kernel, naming the op (issue 37, item 6);
ops whose fake legitimately cannot run outside tracing, list, plain-value and mutating ops
still run."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from opreg_core import register_vmap_op


def _sum0(x: Tensor) -> Tensor:
    return x.sum(0)


def test_a_wrong_fake_shape_fails_at_the_first_call(ns: str) -> None:
    op = register_vmap_op(_sum0, name=f"{ns}::f", fake_fn=lambda x: torch.empty_like(x))
    with pytest.raises(
        RuntimeError,
        match=rf"^opreg: {ns}::f: output 0 of the function on cpu has shape \(4,\), but fake_fn "
        r"returned shape \(3, 4\): fix fake_fn",
    ):
        op(torch.randn(3, 4))
    with pytest.raises(RuntimeError, match="fix fake_fn"):  # through the dispatcher too
        getattr(torch.ops, ns).f(torch.randn(3, 4))


def test_a_wrong_fake_dtype_fails_in_a_device_kernel(ns: str) -> None:
    op = register_vmap_op(
        _sum0, name=f"{ns}::f", fake_fn=lambda x: x.new_empty(x.shape[1:], dtype=torch.float64)
    )
    op.register_kernel("cpu", _sum0)
    message = (
        rf"^opreg: {ns}::f: output 0 of the cpu kernel on cpu has dtype torch.float32, but "
        r"fake_fn returned dtype torch.float64"
    )
    with pytest.raises(RuntimeError, match=message):
        op(torch.randn(3, 4))


def test_a_correct_op_runs_and_later_calls_skip_the_check(ns: str) -> None:
    calls = []

    def fake(x: Tensor) -> Tensor:
        calls.append(1)
        return x.new_empty(x.shape[1:])

    op = register_vmap_op(_sum0, name=f"{ns}::f", fake_fn=fake, differentiable=False)
    x = torch.randn(3, 4)
    for _ in range(3):
        torch.testing.assert_close(op(x), x.sum(0))
    assert calls == [1]


def test_a_data_dependent_fake_is_not_compared_and_the_op_runs(ns: str) -> None:
    def fake(x: Tensor) -> Tensor:
        return x.new_empty(torch.library.get_ctx().new_dynamic_size(), dtype=torch.long)

    op = register_vmap_op(
        lambda x: x.nonzero()[:, 0].clone(), name=f"{ns}::nz",
        schema="(Tensor x) -> Tensor", fake_fn=fake,
    )  # fmt: skip
    assert op(torch.tensor([0.0, 1.0, 2.0])).tolist() == [1, 2]


def test_list_plain_and_mutating_ops_still_run(ns: str) -> None:
    def split(x: Tensor) -> list[Tensor]:
        return [x[0].clone(), x[1].clone()]

    listed = register_vmap_op(split, name=f"{ns}::split", fake_fn=lambda x: [x[0], x[1]])
    assert [t.shape for t in listed(torch.randn(2, 3))] == [(3,), (3,)]
    wrong = register_vmap_op(split, name=f"{ns}::split2", fake_fn=lambda x: [x[0]])
    with pytest.raises(RuntimeError, match=r"output 0 of the function is a list of 2 tensors, "
                       "but fake_fn returned 1"):  # fmt: skip
        wrong(torch.randn(2, 3))

    def count(x: Tensor) -> tuple[Tensor, int]:
        return x * 2, 7

    plain = register_vmap_op(
        count, name=f"{ns}::count", fake_fn=lambda x: (x.new_empty(x.shape), 0)
    )
    assert plain(torch.ones(2))[1] == 7

    def add_(x: Tensor, y: Tensor) -> None:
        x.add_(y)

    mutating = register_vmap_op(add_, name=f"{ns}::add_", mutates_args=("x",), fake_fn=add_)
    x = torch.zeros(2)
    mutating(x, torch.ones(2))
    torch.testing.assert_close(x, torch.ones(2))


def test_the_check_paused_keeps_the_first_call_for_later(ns: str) -> None:
    """opreg-testing's checks pause the comparison (the fake check does it more thoroughly):
    inside the block a wrong fake goes unremarked, and the first call outside still compares."""
    from opreg_core import first_call_fake_check_paused

    op = register_vmap_op(_sum0, name=f"{ns}::f", fake_fn=lambda x: torch.empty_like(x))
    x = torch.randn(3, 4)
    with first_call_fake_check_paused():
        torch.testing.assert_close(op(x), x.sum(0))
        torch.testing.assert_close(op(x), x.sum(0))
    with pytest.raises(RuntimeError, match="fix fake_fn"):
        op(x)


def test_in_an_autocast_region_the_dtype_is_not_compared(ns: str) -> None:
    """A function without an autocast rule computes in the region's dtype (its torch.mm
    autocasts), which its fake cannot know; the shape is still compared."""

    def mm(x: Tensor, w: Tensor) -> Tensor:
        return torch.mm(x, w)

    op = register_vmap_op(mm, name=f"{ns}::mm", fake_fn=lambda x, w: x.new_empty(x.shape[0], 2))
    x, w = torch.randn(3, 4), torch.randn(4, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert op(x, w).dtype == torch.bfloat16
    wrong = register_vmap_op(mm, name=f"{ns}::mm", fake_fn=lambda x, w: x.new_empty(x.shape[0]))
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(RuntimeError, match="shape"):
        wrong(x, w)
