"""The checks on ops with the wider argument and return types: wrong ops of each are caught
(mutants), correct ones pass (no false alarm).

The correct ops of every supported type pass ``check_op`` in ``tests/core/test_signature_types.py``;
here each kind of type gets a correct op and a wrong one that only a check that understands
the type can catch: a ``Tensor?[]`` batched by the vmap check, a keyword-only tensor under
the fake check, a plain-value output under vmap, a list output under the autograd check.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from opreg_core import SampleInput
from opreg_testing import check_op

from .conftest import Register

AOT = {"compile": {"backend": "aot_eager"}}


def r(*shape: int) -> Tensor:
    return torch.randn(*shape, dtype=torch.float64)


def add_terms(x: Tensor, terms: list[Tensor | None]) -> Tensor:
    out = x.clone()
    for t in terms:
        if t is not None:
            out = out + t
    return out


def add_terms_mixing(x: Tensor, terms: list[Tensor | None]) -> Tensor:
    """A wrong batching rule: each term's batch is averaged (entries mix)."""
    out = x.clone()
    for t in terms:
        if t is not None:
            out = out + t.mean(0, keepdim=True)
    return out


TERMS = [SampleInput((r(3), [r(3), None, r(3)]))]


def test_optional_tensor_list_is_batched_by_the_vmap_check(register: Register) -> None:
    good = register(add_terms, fake_fn=add_terms, vmap_fn=add_terms, fake_vmap_fn=add_terms)
    report = check_op(good, TERMS, checks="vmap,fake")
    assert report["vmap"].passed and report["fake"].passed
    assert report["vmap"].info["cases"] > 0
    bad = register(
        add_terms,
        fake_fn=add_terms,
        vmap_fn=add_terms_mixing,
        fake_vmap_fn=add_terms,
        name=f"{good.namespace}::add_terms_mixing",
    )
    report = check_op(bad, TERMS, checks="vmap")
    assert report["vmap"].failed and "vmap(op)" in report["vmap"].reason


def kw_scale(x: Tensor, *, w: Tensor) -> Tensor:
    return x * w


def kw_scale_fake_vmap_wrong(x: Tensor, *, w: Tensor) -> Tensor:
    return x.new_empty(x.shape[1:])  # forgets the batch dim


KW = [SampleInput((r(3),), {"w": r(3)})]


def test_keyword_tensor_under_the_fake_check(register: Register) -> None:
    """The fake check runs vmap(op) with keyword tensors as fake tensors too: a correct
    fake_vmap_fn passes (it used to raise on the real keyword tensor), a wrong one fails."""
    good = register(kw_scale, fake_fn=kw_scale, vmap_fn=kw_scale, fake_vmap_fn=kw_scale)
    report = check_op(good, KW, checks="fake", options={"fake": {"dynamic": False}})
    assert report["fake"].passed, report["fake"].reason
    assert report["fake"].info["fake_vmap_fn"] == "checked"
    bad = register(
        kw_scale,
        fake_fn=kw_scale,
        vmap_fn=kw_scale,
        fake_vmap_fn=kw_scale_fake_vmap_wrong,
        name=f"{good.namespace}::kw_scale_bad",
    )
    report = check_op(bad, KW, checks="fake", options={"fake": {"dynamic": False}})
    assert report["fake"].failed and "shape" in str(report["fake"].failure)


def double_and_len(x: Tensor) -> tuple[Tensor, int]:
    return x * 2, x.shape[0]


def double_and_len_batched(x: Tensor) -> tuple[Tensor, int]:
    return x * 2, x.shape[1]


def double_and_batch_len(x: Tensor) -> tuple[Tensor, int]:
    """A wrong batching rule: the plain output is the batch size, not the sample's length."""
    return x * 2, x.shape[0]


LEN = [SampleInput((r(3),)), SampleInput((r(5),))]


def test_plain_output_under_the_vmap_check(register: Register) -> None:
    good = register(
        double_and_len,
        fake_fn=double_and_len,
        vmap_fn=double_and_len_batched,
        fake_vmap_fn=double_and_len_batched,
    )
    report = check_op(good, LEN, options=AOT)
    assert not report.by_status("failed"), report
    bad = register(
        double_and_len,
        fake_fn=double_and_len,
        vmap_fn=double_and_batch_len,
        fake_vmap_fn=double_and_batch_len,
        name=f"{good.namespace}::double_and_batch_len",
    )
    report = check_op(bad, LEN, checks="vmap")
    assert report["vmap"].failed and "output 1" in str(report["vmap"].failure)


def pieces(x: Tensor) -> list[Tensor]:
    return [x * 2, x * x]


def save_x(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(inputs[0])


def pieces_backward(ctx: Any, gs: list[Tensor]) -> Tensor:
    (x,) = ctx.saved_tensors
    return gs[0] * 2 + gs[1] * 2 * x


def pieces_backward_wrong(ctx: Any, gs: list[Tensor]) -> Tensor:
    (x,) = ctx.saved_tensors
    return gs[0] * 2 + gs[1] * x  # the square's derivative is 2x


def test_list_output_under_the_autograd_check(register: Register) -> None:
    """A list output is tracked by autograd: a right backward passes, a wrong one fails (its
    gradient used to be silently lost)."""
    samples = [SampleInput((r(3),))]
    good = register(
        pieces,
        fake_fn=pieces,
        vmap_fn=pieces,
        fake_vmap_fn=pieces,
        setup_context=save_x,
        backward=pieces_backward,
    )
    report = check_op(good, samples, options=AOT)
    assert not report.by_status("failed"), report
    assert report["autograd"].passed
    bad = register(
        pieces,
        fake_fn=pieces,
        setup_context=save_x,
        backward=pieces_backward_wrong,
        name=f"{good.namespace}::pieces_bad",
    )
    report = check_op(bad, samples, checks="autograd")
    assert report["autograd"].failed
