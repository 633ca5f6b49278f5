"""The compiler-visible mode of ``register_triton_op`` (``compiler_visible=True``).

In this mode the launcher calls its kernels as ``torch.library.wrap_triton(kernel)[grid](...)``
and uses only PyTorch operations otherwise. Then:

- **eager** is unchanged: the dispatcher kernel runs the launcher on the Triton device types
  (with ``wrap_triton``'s dispatch off, so ``wrap_triton`` hands back the kernel itself and a
  launch costs what a plain ``kernel[grid](...)`` costs) and the fallback everywhere else;
- **torch.compile**: when AOTAutograd traces the op (under ``FunctionalTensorMode``) on a device
  type that runs the op's Triton launcher right now (Triton available, not its interpreter),
  the op decomposes into its launcher's operations, as ``torch.library.triton_op`` does: the
  compiled graph holds the Triton kernel itself (``triton_kernel_wrapper_functional``), and
  Inductor launches it from its generated code. On every other device (CPU, devices without a
  kernel, Triton off or interpreted) the op stays opaque and runs what eager runs, so compiled
  results equal eager ones there (``torch.library.triton_op`` traces the Triton body for CPU
  tensors too);
- **torch.export** keeps the op whole, as it does for ``torch.library.triton_op``; AOTInductor
  (``torch._inductor.aoti_compile_and_package``) decomposes it again, so the package holds the
  kernel and runs without opreg.

The rules are registered with each registration, in a library of their own that the op's
:class:`~opreg_kernels.TritonKernelInfo` destroys when opreg-core releases it
(``opreg_core.unregister``, or a re-registration of the name, visible or not): nothing of an
op stays behind, and a re-registration starts clean.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ._availability import has_triton, triton_interpreted
from ._dispatch_kernel import (
    first_tensor,
    is_caller_error,
    raised_in_triton,
    resolve_launcher,
)
from ._kernel_info import TritonKernelInfo
from ._private import (
    decomposable_types,
    destroy_library,
    export_keeps_triton_ops,
    functional_tensor_mode,
)

__all__ = ["add_decomposition_rules"]


def _device_type(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The device type of the first tensor argument, or None without one."""
    tensor = first_tensor(args, kwargs)
    return None if tensor is None else tensor.device.type


def _visible_launcher(
    info: TritonKernelInfo, batched: bool, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Callable[..., Any] | None:
    """The launcher to decompose this call into, or None to keep the op opaque."""
    launcher = info.batched_launcher if batched else info.launcher
    device = _device_type(args, kwargs)
    if launcher is None or device is None or device not in info.device_types:
        return None
    if not has_triton() or triton_interpreted():  # the interpreter: wrap_triton cannot trace
        return None
    return resolve_launcher(launcher)


def _traced(qualname: str, device: str | None, exc: Exception) -> Exception:
    """The error for a launcher that failed while being traced (input errors pass unchanged)."""
    if is_caller_error(exc):
        return exc
    detail = str(exc).strip().splitlines()
    reason = f"{type(exc).__name__}: {detail[0]}" if detail else type(exc).__name__
    if raised_in_triton(exc.__traceback__):
        what = "it launched a Triton kernel that torch could not trace"
    else:
        what = "it could not be traced"
    return RuntimeError(
        f"opreg: {qualname}: compiler_visible=True, but the Triton launcher failed while "
        f"torch.compile traced it on {device!r}: {what} ({reason}). In this mode the launcher "
        "must launch every kernel as torch.library.wrap_triton(kernel)[grid](...) and use "
        "only PyTorch operations otherwise; or register the op with compiler_visible=False "
        "(opaque to the compiler)."
    )


def _make_rule(info: TritonKernelInfo, batched: bool) -> Callable[..., Any]:
    qualname = info.op.qualname
    label = f"{qualname} (vmap)" if batched else qualname

    def rule(
        mode: Any, func: Any, types: tuple[type, ...], args: tuple[Any, ...], kwargs: Any
    ) -> Any:
        kwargs = kwargs or {}
        launcher = None if export_keeps_triton_ops() else _visible_launcher(
            info, batched, args, kwargs
        )  # fmt: skip
        if launcher is None:
            return mode.__torch_dispatch__(func, types, args, kwargs)
        if not decomposable_types(types):
            return NotImplemented  # another tensor subclass: let it handle the op first
        try:
            with mode:
                return launcher(*args, **kwargs)
        except Exception as exc:
            error = _traced(label, _device_type(args, kwargs), exc)
            if error is exc:
                raise
            raise error from exc

    return rule


def add_decomposition_rules(info: TritonKernelInfo, operators: list[Any]) -> None:
    """Give ``operators`` (the op's ``OpOverload`` and, if it has one, its batched one) the
    decomposition rule of ``info``'s op, until ``info`` is released."""
    library = torch.library.Library(info.op.namespace, "FRAGMENT")  # type: ignore[no-untyped-call]
    try:
        for index, operator in enumerate(operators):
            rule = _make_rule(info, batched=index > 0)
            torch.library.register_torch_dispatch(
                operator, functional_tensor_mode(), rule, lib=library
            )
    except BaseException:
        destroy_library(library)
        raise
    info.on_release(lambda: destroy_library(library))
