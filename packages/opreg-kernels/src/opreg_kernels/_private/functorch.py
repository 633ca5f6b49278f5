"""torch: functorch's wrapped tensors, which the derivative guard recognises."""

from __future__ import annotations

import torch

#: torch internals of the derivative guard (``_derivative_guard.py``), in every build.
INTERNALS: tuple[str, ...] = ("torch._C._functorch.is_functorch_wrapped_tensor",)


# Why: a backward (or jvp) that calls a Triton launcher directly fails under torch.func
# transforms, whose tensors are wrappers without storage; the guard names the op and says what
# to do instead only when such a wrapper reached it. Checked on torch 2.11, 2.13, 2.14, 2.15.
# Public replacement: none (a public "is this a functorch wrapper" query).


def functorch_wrapped(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a functorch wrapper (grad, jvp or vmap level), not a plain tensor."""
    return bool(torch._C._functorch.is_functorch_wrapped_tensor(tensor))
