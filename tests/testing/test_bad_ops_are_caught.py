"""Bad ops that PyTorch itself runs without complaint are caught by the checks, precisely."""

from __future__ import annotations

import pytest
import torch

from opreg_core import SampleInput, register_vmap_op
from opreg_testing import CheckFailure, OpNamespace, check_fake, check_opcheck

SAMPLES = [SampleInput((torch.ones(3),), name="ones")]


def test_an_op_returning_an_alias_of_its_input(opreg_namespace: OpNamespace) -> None:
    op = register_vmap_op(
        lambda x: x,
        fake_fn=lambda x: torch.empty_like(x),
        name=opreg_namespace.qualname("alias"),
        schema="(Tensor x) -> Tensor",
    )
    with pytest.raises(CheckFailure) as info:
        check_opcheck(op, SAMPLES, test_utils="test_schema")
    message = str(info.value)
    assert f"{op.qualname}" in message and "opcheck" in message
    assert "alias" in message


def test_an_undeclared_mutation(opreg_namespace: OpNamespace) -> None:
    def bump(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)  # mutates x, but mutates_args does not say so
        return x.clone()

    op = register_vmap_op(
        bump, fake_fn=lambda x: torch.empty_like(x), name=opreg_namespace.qualname("bump")
    )
    with pytest.raises(CheckFailure) as info:
        check_opcheck(op, [SampleInput((torch.ones(3),))], test_utils="test_schema")
    assert "mutat" in str(info.value) and op.qualname in str(info.value)


def test_a_fake_that_disagrees_with_the_real_output(opreg_namespace: OpNamespace) -> None:
    op = register_vmap_op(
        lambda x: x.sum(0),
        fake_fn=lambda x: torch.empty_like(x),
        name=opreg_namespace.qualname("sum0"),
        schema="(Tensor x) -> Tensor",
    )
    with pytest.raises(CheckFailure) as info:
        check_fake(op, [SampleInput((torch.ones(2, 3),), name="2x3")])
    message = str(info.value)
    assert op.qualname in message and "2x3" in message and "shape" in message
