"""The Python frames a call of an op runs: through the op object (``opreg_core._call_path``)
only opreg's one frame (and its route's, for a recorded call), its forward-AD query and the
kernel's own frames
(no wrapper of opreg's between the caller and the kernel); through the dispatcher
(``torch.ops``), the dispatcher's kernels."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import torch

import opreg_core
from opreg_core import register_vmap_op

_OPREG = str(Path(opreg_core.__file__).parent)


def _fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def _frames(call: Callable[[], Any]) -> list[str]:
    """The frames of opreg's and of this module that ``call()`` runs, ``call`` itself left out
    (torch's are left out too: ``torch.compiler.is_compiling`` is a Python function)."""
    calls: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        code = frame.f_code
        if (
            event == "call"
            and code.co_name != "<lambda>"
            and (code.co_filename.startswith(_OPREG) or code.co_filename == __file__)
        ):
            calls.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.parametrize(
    ("differentiable", "requires_grad", "frames"),
    [
        # Nothing autograd could record: the fallback itself.
        (False, False, ["call", "double"]),
        # An input requires grad: the fallback behind the guard that runs it below autograd.
        (False, True, ["call", "guarded", "double"]),
        (True, False, ["call", "double"]),
        # Recorded: the ``recorded`` route applies the op's Function, whose forward (settled
        # after the warm call, see DirectRecord.function_for) runs the fallback.
        (True, True, ["call", "recorded", "plain_forward", "double"]),
    ],
)
def test_a_call_runs_only_the_kernels_frames(
    ns: str, differentiable: bool, requires_grad: bool, frames: list[str]
) -> None:
    op = register_vmap_op(
        double, fake_fn=_fake, name=f"{ns}::double", differentiable=differentiable
    )
    x = torch.ones(2, requires_grad=requires_grad)
    op(x)  # warm: first calls may run one-time setup (the aliasing check, the Function)
    out: list[torch.Tensor] = []
    assert _frames(lambda: out.append(op(x))) == frames
    assert torch.equal(out[0], x.detach() * 2)
    assert out[0].requires_grad is (differentiable and requires_grad)


@pytest.mark.parametrize(
    ("differentiable", "frames"),
    [
        (False, ["guarded", "double"]),
        # The Autograd kernel (nothing requires grad: it redispatches), then the fallback.
        (True, ["kernel", "forward_mode_ad_active", "double"]),
    ],
)
def test_a_call_through_torch_ops_runs_the_dispatchers_kernels(
    ns: str, differentiable: bool, frames: list[str]
) -> None:
    register_vmap_op(double, fake_fn=_fake, name=f"{ns}::double", differentiable=differentiable)
    overload = getattr(torch.ops, ns).double.default
    x = torch.ones(2)
    overload(x)
    assert _frames(lambda: overload(x)) == frames
