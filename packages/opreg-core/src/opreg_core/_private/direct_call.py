"""The direct call: what an op's call reads before it takes the dispatcher's route itself."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

# Why: an op's call takes the dispatcher's route itself when nothing could route it differently
# (``_call_path``): it reads the dispatch key set of each tensor (plain dense tensors of one
# device type: no subclass, view bit, sparse or nested layout, batched or functional wrapper),
# whether functorch transforms or the profiler are active, and whether autograd is excluded
# below an outer kernel.
# A speed path: taken only on a torch release CI tests (``_versions``); otherwise the op takes
# the dispatcher's route, with the same results.
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: a ``torch.library`` fast path for Python kernels (one crossing into Python
# per call, as ``torch.autograd.Function.apply`` has), or public queries for these states.

#: Dotted names of the internals used here.
INTERNALS: tuple[str, ...] = (
    "torch._C._are_functorch_transforms_active",
    "torch._C._any_requires_grad",
    "torch.autograd.profiler._is_profiler_enabled",
    "torch.compiler._is_compiling_flag",
    "torch._C._dispatch_tls_is_dispatch_key_excluded",
    "torch._C.DispatchKey.AutogradFunctionality",
    "torch._C._increment_version",
    "torch._C._dispatch_keys",
)


functorch_transforms_active: Callable[[], bool] = torch._C._are_functorch_transforms_active
#: Whether a tensor among the arguments (or in a list of tensors among them) requires grad.
any_requires_grad: Callable[..., bool] = torch._C._any_requires_grad
#: Whether a profiler started from Python is on: the flag ``torch.autograd.profiler`` sets on
#: every profiler's start, which Inductor's Triton launchers read too (a C-level partial:
#: 34 ns a call on the 2-core VM, against 49 ns for ``torch._C._autograd._profiler_enabled``).
profiler_enabled: Callable[[], bool] = functools.partial(
    getattr, torch.autograd.profiler, "_is_profiler_enabled"
)
#: ``torch.compiler.is_compiling()`` without its two Python frames: the flag it returns, set
#: while ``torch.export`` traces (non-strict export runs the op object's call) and, on torch
#: 2.13 to 2.15 (not 2.11), in code Dynamo traces (which puts the op object into its graph
#: without running its call).
compiling: Callable[[], bool] = functools.partial(getattr, torch.compiler, "_is_compiling_flag")
#: Whether autograd is excluded from dispatch here (below an outer kernel's autograd, or in
#: inference mode): the dispatcher would not run an op's ``Autograd`` kernel. (A partial: no
#: Python frame.)
autograd_excluded: Callable[[], bool] = functools.partial(
    torch._C._dispatch_tls_is_dispatch_key_excluded, torch._C.DispatchKey.AutogradFunctionality
)
#: Bump the version counters of a sequence of tensors, as a mutating op's ``ADInplaceOrView``
#: kernel does (``torch.autograd.graph.increment_version`` is the public form, a Python frame
#: more; an inference tensor has no counter and is left alone).
bump_versions: Callable[[Sequence[torch.Tensor]], None] = torch._C._increment_version
#: Whether the ``ADInplaceOrView`` key is excluded from dispatch here (below a mutating op's
#: version bump): the dispatcher would bump no version counter. (A partial: no Python frame.)
inplace_or_view_excluded: Callable[[], bool] = functools.partial(
    torch._C._dispatch_tls_is_dispatch_key_excluded, torch._C.DispatchKey.ADInplaceOrView
)


_dispatch_keys: Callable[[torch.Tensor], Any] = torch._C._dispatch_keys


def dispatch_keys_raw(tensor: torch.Tensor) -> int:
    """The dispatch key set of a tensor, as an int (equal sets, equal ints). (No ``cast``: the
    direct call reads it per tensor, and ``typing.cast`` is a Python call.)"""
    raw: int = _dispatch_keys(tensor).raw_repr()
    return raw
