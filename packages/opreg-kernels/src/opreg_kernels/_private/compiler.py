"""torch: the compiler-visible mode, and ``wrap_triton``'s dispatch turned off in eager."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

#: torch internals of the compiler-visible mode (``_compiler_visible.py``) and of
#: ``wrap_triton_disabled`` (``_dispatch_kernel.py``), in every build.
INTERNALS: tuple[str, ...] = (
    "torch._subclasses.functional_tensor.FunctionalTensorMode",
    "torch._subclasses.functional_tensor.FunctionalTensor",
    "torch._subclasses.fake_tensor.FakeTensor",
    "torch._library.triton.wrap_triton_enabled",
    "torch._library.triton.wrap_triton_enabled_default",
    "torch.export._trace.custom_triton_ops_decomposition_disabled",
    "torch.library.Library._destroy",
)


# Why: a compiler-visible op decomposes into its launcher's ``wrap_triton`` kernel calls when
# AOTAutograd traces it, exactly as ``torch.library.triton_op`` does (torch/_library/triton.py,
# ``functional_decomp``): through a ``torch.library.register_torch_dispatch`` rule (public) for
# the mode AOTAutograd traces under, ``FunctionalTensorMode`` (private class). The rule
# accepts the tensor types torch's own rule accepts (plain, fake and functional tensors) and
# leaves the op opaque under ``torch.export``, as torch's does (a private query).
# Checked on torch 2.11, 2.13, 2.14, 2.15. Public replacement: ``torch.library.triton_op``
# with a per-device choice of decomposing (it traces the Triton body on every device, CPU
# included), or a public handle on the mode.
# The tensor modules are imported where they are first needed, not at ``import opreg_kernels``
# (torch versions that do not import them themselves would pay for them on every import).


def functional_tensor_mode() -> type:
    """``FunctionalTensorMode``, the mode a compiler-visible op's decomposition rule is for."""
    from torch._subclasses.functional_tensor import FunctionalTensorMode

    return FunctionalTensorMode


def decomposable_types(types: tuple[type, ...]) -> bool:
    """Whether a decomposition may run on these tensor types: plain, functional and fake
    tensors, as torch's rule decides (any other subclass gets NotImplemented first)."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch._subclasses.functional_tensor import FunctionalTensor

    return all(t in (torch.Tensor, FunctionalTensor) or issubclass(t, FakeTensor) for t in types)


def export_keeps_triton_ops() -> bool:
    """Whether ``torch.export`` is tracing, which keeps custom Triton ops whole (torch's rule)."""
    from torch.export._trace import custom_triton_ops_decomposition_disabled

    return bool(custom_triton_ops_decomposition_disabled())  # type: ignore[no-untyped-call]


# Why: an op's compiler-visible rules live in a ``torch.library.Library`` of their own, which
# must drop them when the op's registration ends (``opreg_core.unregister``, a re-registration):
# otherwise torch keeps a rule for a dead op and refuses a second rule for the name. Dropping
# the Library's registrations before it is garbage collected (never, while torch holds the
# rule) is private; opreg-core's ``_private`` wraps the same method for the op's own
# libraries. Checked on torch 2.11, 2.13, 2.14, 2.15. Public replacement: none (a public
# ``Library.destroy()``).
def destroy_library(library: torch.library.Library) -> None:
    """Remove every registration of ``library`` (here: torch_dispatch rules)."""
    library._destroy()  # type: ignore[no-untyped-call]


# Why: in eager a launcher calls ``torch.library.wrap_triton(kernel)[grid](...)`` with plain
# tensors; with wrap_triton's dispatch on, that call goes through the Triton higher-order op
# (hundreds of microseconds); off, ``wrap_triton`` returns the kernel itself. torch's own
# ``triton_op`` runs its function under ``set_wrap_triton_enabled(False)`` (a private context
# manager); its generator costs about a microsecond per call, so the thread-local flag it
# sets is set here directly. Checked on torch 2.11, 2.13, 2.14, 2.15. Public replacement:
# none (a public ``set_wrap_triton_enabled``).


def wrap_triton_disabled(resolve: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
    """A function that runs ``resolve()``'s function (resolved on its first call) with
    ``torch.library.wrap_triton``'s dispatch off (``wrap_triton`` then returns the kernel).
    ``torch._library.triton`` is imported on that first call too."""
    fn: Callable[..., Any] | None = None
    lib: Any = None
    state: Any = None

    def run(*args: Any, **kwargs: Any) -> Any:
        nonlocal fn, lib, state
        if fn is None:
            import torch._library.triton as lib

            state = lib.wrap_triton_enabled
            fn = resolve()
        previous = getattr(state, "value", lib.wrap_triton_enabled_default)
        state.value = False
        try:
            return fn(*args, **kwargs)
        finally:
            state.value = previous

    return run
