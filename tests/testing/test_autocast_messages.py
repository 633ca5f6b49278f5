"""The autocast check's gradient failure names the argument (as the user named it) and says
what "expected" is: autograd through the rule's cast and the fallback (issue 37, item 5)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from opreg_core import SampleInput, register_vmap_op
from opreg_testing import CheckFailure, OpNamespace, check_autocast


def test_a_wrong_gradient_under_autocast_names_the_argument(
    opreg_namespace: OpNamespace,
) -> None:
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(*inputs)

    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor]:
        a, b = ctx.saved_tensors
        return g * b, (g * a).sum(0) * 2  # b's gradient is wrong

    op = register_vmap_op(
        lambda a, b: a * b,
        name=opreg_namespace.qualname("scale"),
        schema="(Tensor a, Tensor b) -> Tensor",
        fake_fn=lambda a, b: torch.empty_like(a),
        setup_context=setup_context,
        backward=backward,
        autocast="lower_precision",
    )
    sample = SampleInput((torch.randn(3, 4), torch.randn(4)), name="3x4")
    with pytest.raises(CheckFailure) as info:
        check_autocast(op, [sample])
    message = str(info.value)
    assert "the gradient of argument 'b' differs" in message, message
    assert "cast input" not in message
    assert "autograd through a differentiable cast to torch.bfloat16 and op.fallback" in message
