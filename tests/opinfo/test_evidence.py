"""The evidence the sweep files a raise by, on the real OpInfo ops it was found on: each
function reproduces the raise without opreg, and the sweep files those cases by it."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from .build import NotExpressible, OpCase, build_case
from .outcomes import BACKWARD_UNDER_VMAP, CANNOT_BATCH, Tally
from .sweep import full_name, op_db, samples, sweep_case, twin_result
from .transforms import backward_under_vmap_error, expanded_rule_error, native_vmap_error


def _case(name: str) -> OpCase:
    opinfo: Any = next(o for o in op_db() if full_name(o) == name)
    index, sample = next(samples(opinfo, torch.float64, 1, Tally()))
    return build_case(opinfo, sample, index, torch.float64)


def test_nested_native_vmap_evidence() -> None:
    """lu_solve: vmap(vmap(grad(native))) raises a PyTorch INTERNAL ASSERT; one level works."""
    case = _case("lu_solve")
    level = (0, 0, 0)
    assert native_vmap_error(case, [level], grad=True) is None
    exc = native_vmap_error(case, [level, level], grad=True)
    assert exc is not None and "*bdim < tensor.dim()" in str(exc)


def test_vmap_fn_that_cannot_batch() -> None:
    """column_stack: torch.vmap of it raises with every argument batched (no batching rule),
    while vmap(grad(native)) works (grad decomposes it): the sweep files opreg's raise there
    as the generic rule's own (rule_cant d), not opreg's."""
    case = _case("column_stack")
    exc = expanded_rule_error(case, (0, 0))
    assert exc is not None and "Batching rule not implemented" in str(exc)
    assert native_vmap_error(case, [(0, 0)], grad=True) is None
    tally = Tally()
    sweep_case(case, tally, run_check_op=True)
    autograd = next(c for c in tally.cases if c.case == "check_op:autograd")
    assert (autograd.category, autograd.defect) == ("rule_cant", CANNOT_BATCH.key)


def test_backward_that_cannot_run_under_vmap() -> None:
    """scatter_reduce prod: the generic backward (torch.func.vjp of the native op) run under
    vmap calls .item(): opreg's derived batched backward raises that on its own (rule_cant e)."""
    case = _case("scatter_reduce.prod")
    in_dims = tuple(0 if i == case.diff_pos[0] else None for i in range(len(case.args)))
    exc = backward_under_vmap_error(case, in_dims)
    assert exc is not None and ".item()" in str(exc)
    tally = Tally()
    sweep_case(case, tally, run_check_op=False)
    outcome = next(c for c in tally.cases if c.case == "grad(vmap)")
    assert (outcome.category, outcome.defect) == ("rule_cant", BACKWARD_UNDER_VMAP.key)


def test_forward_ad_where_the_native_op_has_it() -> None:
    """OpInfo says linear_cross_entropy's chunked variant has no forward AD, yet torch.func.jvp
    of it works on the sample: the generic rules then include a jvp, as an author's would."""
    name = "nn.functional.linear_cross_entropy.chunked"
    assert not next(o for o in op_db() if full_name(o) == name).supports_forward_ad
    assert _case(name).supports_forward_ad


def test_twin_opcheck_runs_with_inputs_that_require_grad() -> None:
    """The twin's opcheck runs with grad inputs too, as the check does for an opreg op with a
    backward: special.entr's NaN gradients fail torch's own opcheck on the twin as well."""
    twin = twin_result(_case("special.entr"), "opcheck")
    assert twin is not None and "Gradients of the operator are different" in twin
    assert twin_result(_case("sin"), "opcheck") is None


def test_uninitialized_output_is_nondeterministic() -> None:
    """new_empty_strided returns uninitialized memory: the build refuses it every time, not
    only when two calls happen to find different leftovers in freed memory."""
    opinfo: Any = next(o for o in op_db() if full_name(o) == "new_empty_strided")
    index, sample = next(samples(opinfo, torch.float64, 1, Tally()))
    for _ in range(5):
        with pytest.raises(NotExpressible, match="nondeterministic"):
            build_case(opinfo, sample, index, torch.float64)
    assert _case("zeros_like").out_shapes  # an op that writes its allocation is kept
