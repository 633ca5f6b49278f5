"""A call of an op goes straight into the dispatcher: the only Python frames it runs are the
kernels' (no wrapper of opreg's between the caller and the dispatcher)."""

from __future__ import annotations

import sys
from types import FrameType

import pytest
import torch

from opreg_core import register_vmap_op


def _fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@pytest.mark.parametrize(
    ("differentiable", "frames"),
    [
        # The fallback, behind the guard that runs it below autograd.
        (False, ["guarded", "double"]),
        # The Autograd kernel (nothing requires grad: it redispatches), then the fallback.
        (True, ["kernel", "forward_mode_ad_active", "double"]),
    ],
)
def test_a_call_runs_only_the_kernels_frames(
    ns: str, differentiable: bool, frames: list[str]
) -> None:
    op = register_vmap_op(
        double, fake_fn=_fake, name=f"{ns}::double", differentiable=differentiable
    )
    x = torch.ones(2)
    op(x)  # warm: first calls may run one-time setup
    calls: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            calls.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        out = op(x)
    finally:
        sys.setprofile(None)
    assert calls == frames
    assert torch.equal(out, x * 2)
