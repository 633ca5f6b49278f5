"""Mutating ops: the ``ADInplaceOrView`` kernel that bumps the version of mutated inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ._private import (
    AFTER_AD_INPLACE_OR_VIEW_KEYSET,
    AutoDispatchBelowADInplaceOrView,
    bump_versions,
)
from ._signature import Signature


def make_mutation_kernel(overload: Any, signature: Signature) -> Callable[..., Any]:
    """The ``ADInplaceOrView`` kernel of a mutating op: bump the mutated inputs' versions, so
    autograd detects a saved tensor that the op changed (as ``custom_op`` does)."""
    positions = [
        signature.positional.index(n) for n in signature.mutated if n in signature.positional
    ]
    keywords = [n for n in signature.mutated if n in signature.kwarg_only]

    def bump(value: Any) -> None:
        values = value if isinstance(value, (list, tuple)) else (value,)
        bump_versions([t for t in values if isinstance(t, torch.Tensor)])

    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        for i in positions:
            if i < len(args):
                bump(args[i])
        for name in keywords:
            if name in kwargs:
                bump(kwargs[name])
        with AutoDispatchBelowADInplaceOrView():
            return overload.redispatch(keyset & AFTER_AD_INPLACE_OR_VIEW_KEYSET, *args, **kwargs)

    return kernel
