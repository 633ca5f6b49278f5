"""The error opreg raises when asked for a derivative that an op does not define."""

from __future__ import annotations

from typing import Literal

__all__ = ["NotDifferentiableError"]


class NotDifferentiableError(RuntimeError):
    """A derivative was asked of an op registered without it: a gradient through an op without
    a ``backward`` (``mode="reverse"``: ``.backward()``, ``torch.func.grad``, or double
    backward through a backward that calls such an op), or a tangent through an op without a
    ``jvp`` (``mode="forward"``: ``torch.func.jvp``, ``jacfwd``, ``hessian``, dual tensors).

    A clear refusal in place of a silently zero derivative, the counterpart of
    ``torch.autograd.function.once_differentiable``: opreg-testing reports an op whose backward
    reaches it as "once differentiable" rather than failing it. ``op`` is the qualified name of
    the op that has no such derivative. A ``RuntimeError``, as before it had its own class.
    """

    def __init__(
        self, message: str, op: str = "", mode: Literal["reverse", "forward"] = "reverse"
    ) -> None:
        super().__init__(message)
        self.op = op
        self.mode = mode
