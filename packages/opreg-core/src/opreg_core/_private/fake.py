"""Fake tensors: a fake run again under a ``FakeTensorMode``, before the op is blamed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .trees import tree_map_only

# Why: the first eager call of each kernel runs the op's fake on meta copies of its inputs and
# compares the outputs' shapes and dtypes (``_fake_check``). Where they differ, the fake is run
# again under a ``FakeTensorMode``, as torch.compile runs it, before the op is blamed: for some
# ops the meta device and fake tensors disagree (``native_batch_norm``'s saved statistics in
# eval mode). Only then: building the mode imports torch's compiler stack (and Triton).
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: a public ``FakeTensorMode`` (``torch.library.opcheck`` builds its own).

#: Dotted names of the internals used here.
INTERNALS: tuple[str, ...] = (
    "torch._subclasses.fake_tensor.FakeTensorMode",
    "torch._subclasses.fake_tensor.FakeTensorMode.from_tensor",
)


def fake_run(fake: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``fake`` on fake copies of the tensors of ``args`` and ``kwargs`` (detached; lists
    too), under a fresh ``FakeTensorMode``."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()

    def copy(t: torch.Tensor) -> torch.Tensor:
        return mode.from_tensor(t.detach())

    fake_args = tree_map_only(torch.Tensor, copy, args)
    fake_kwargs = tree_map_only(torch.Tensor, copy, kwargs)
    with mode:
        return fake(*fake_args, **fake_kwargs)
