"""The error opreg raises when asked for a derivative that an op does not define, and the
warning of a name taken over by another definition."""

from __future__ import annotations

from typing import Literal

__all__ = ["NotDifferentiableError", "OpRedefinedWarning"]


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


class OpRedefinedWarning(UserWarning):
    """An op's name was registered again from another definition (another module or another
    function): the new op takes the name over, and handles of the earlier op raise when called
    rather than compute the new definition. Re-running the same definition (a notebook cell, a
    reload: same module and qualname) replaces the op quietly, and its old handles follow."""
