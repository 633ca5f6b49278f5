"""Derivatives an op declines with a clear error, which the autograd check reports instead of
failing: "once differentiable" (double backward raises) and "no forward mode" (no jvp).

Only two errors count as a clear refusal, so that a backward whose own backward fails for any
other reason (a shape error, a bug) still fails the check:

- opreg's :class:`~opreg_core.NotDifferentiableError` (public API of opreg-core), raised by an
  op registered without a ``backward`` when a gradient is asked through it (``mode`` "reverse":
  e.g. the backward of a once-differentiable op calls such an op, as a Triton backward
  registered as its own op does), and by an op without a ``jvp`` in forward mode ("forward");
- the error of ``torch.autograd.function.once_differentiable``, a plain ``RuntimeError`` (torch
  gives it no class of its own), recognised by its fixed message.
"""

from __future__ import annotations

import re
from typing import Literal

from opreg_core import NotDifferentiableError

#: The message of the error ``torch.autograd.function.once_differentiable`` raises under
#: double backward (torch's own wording, unchanged since the decorator exists).
TORCH_ONCE_DIFFERENTIABLE = (
    "trying to differentiate twice a function that was marked with @once_differentiable"
)


def first_sentence(exc: BaseException) -> str:
    """The first sentence of ``exc``'s message (its first line if there is no full stop)."""
    lines = str(exc).strip().splitlines()
    line = lines[0] if lines else type(exc).__name__
    found = re.match(r"(.*?\.)(\s|$)", line)
    return found.group(1) if found else line


def declined(exc: BaseException, mode: Literal["reverse", "forward"]) -> str | None:
    """The first sentence of ``exc`` if it is a clear refusal of a derivative in ``mode`` (see
    the module docstring), else None."""
    if isinstance(exc, NotDifferentiableError):
        return first_sentence(exc) if exc.mode == mode else None
    if mode == "reverse" and type(exc) is RuntimeError and TORCH_ONCE_DIFFERENTIABLE in str(exc):
        return TORCH_ONCE_DIFFERENTIABLE
    return None
