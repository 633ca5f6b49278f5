"""The checks, one module each; :data:`CHECKS` maps a check's name to its declaration."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ._harness import Check, CheckContext
from .autocast import AUTOCAST, AutocastOptions, check_autocast
from .autograd import AUTOGRAD, AutogradOptions, check_autograd
from .compile import COMPILE, CompileOptions, check_compile
from .export import EXPORT, ExportOptions, check_export
from .fake import FAKE, FakeOptions, check_fake
from .kernel import KERNEL, KernelOptions, check_kernel
from .opcheck import OPCHECK, OPCHECK_UTILS, OpcheckOptions, check_opcheck
from .vmap import VMAP, VmapOptions, check_vmap

#: Every check by name, in the order ``check_op`` runs them: its body and its options.
CHECKS: Mapping[str, Check[Any]] = MappingProxyType(
    {
        check.name: check
        for check in (FAKE, VMAP, COMPILE, EXPORT, AUTOGRAD, KERNEL, OPCHECK, AUTOCAST)
    }
)

#: The names of all checks, in run order.
ALL_CHECKS: tuple[str, ...] = tuple(CHECKS)

__all__ = [
    "ALL_CHECKS",
    "CHECKS",
    "OPCHECK_UTILS",
    "AutocastOptions",
    "AutogradOptions",
    "Check",
    "CheckContext",
    "CompileOptions",
    "ExportOptions",
    "FakeOptions",
    "KernelOptions",
    "OpcheckOptions",
    "VmapOptions",
    "check_autocast",
    "check_autograd",
    "check_compile",
    "check_export",
    "check_fake",
    "check_kernel",
    "check_opcheck",
    "check_vmap",
]
