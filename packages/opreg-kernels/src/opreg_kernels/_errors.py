"""The error raised when a Triton kernel fails to compile or launch."""

from __future__ import annotations

from ._availability import DISABLE_ENV_VAR

__all__ = ["TritonKernelError"]


class TritonKernelError(RuntimeError):
    """A Triton kernel of an opreg op failed to compile or launch.

    Names the op and the device and says how to fall back to PyTorch; the
    original exception is chained as ``__cause__``. ``hint``, when given, says what
    probably caused the failure and what to do (e.g. warm up before a CUDA graph capture).
    """

    def __init__(
        self, op_name: str, device: str, cause: BaseException, hint: str | None = None
    ) -> None:
        detail = str(cause).strip().splitlines()
        reason = f"{type(cause).__name__}: {detail[0]}" if detail else type(cause).__name__
        advice = f" Probably {hint}." if hint else ""
        super().__init__(
            f"opreg: {op_name}: the Triton kernel failed to compile or launch on device {device!r} "
            f"({reason}).{advice} "
            f"Set {DISABLE_ENV_VAR}=1 to run the PyTorch fallback instead."
        )
        self.op_name = op_name
        self.device = device
