"""The downstream package's op tests: every opreg check on every op, through the plugin.

``opreg_device`` runs each test once per device (``--opreg-device``; default: cpu, cuda when
present, and triton-cpu when Triton kernels can run on CPU here, where ``soft_clamp``'s Triton
kernel runs through Triton's interpreter); ``opreg_check`` runs the check, fails the test with
its message, or skips it when the check does not apply (for example autograd on
``nearest_index``, or an op without a Triton kernel on triton-cpu: it is checked on cpu).
"""

import downstream_ops
import pytest
import torch

from opreg_testing import ALL_CHECKS, check_vmap, parametrize_ops


@parametrize_ops("downstream_ops")
@pytest.mark.parametrize("check", ALL_CHECKS)
def test_op(op, check, opreg_device, opreg_check):
    opreg_check(op, check)


def test_pairwise_sqdist_uses_its_batching_rule(opreg_device):
    result = check_vmap(downstream_ops.pairwise_sqdist, device=opreg_device)
    assert result.info["batching"] == "vmap_fn"


def test_nearest_index_known_answer(opreg_device):
    x = torch.tensor([[0.0, 0.0], [5.0, 5.0], [0.9, 1.2]], device=opreg_device)
    centers = torch.tensor([[1.0, 1.0], [4.0, 4.0]], device=opreg_device)
    assert downstream_ops.nearest_index(x, centers).tolist() == [0, 1, 0]


def test_soft_clamp_known_answer(opreg_device):
    x = torch.tensor([0.0, 1.0, -3.0], device=opreg_device)
    assert downstream_ops.soft_clamp(x, 1.0).tolist() == [0.0, 0.5, -0.75]
