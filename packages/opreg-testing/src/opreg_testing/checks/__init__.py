"""The checks, one module each; :data:`CHECKS` maps a check's name to its body."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from ._common import CheckContext
from .autograd import check_autograd, run_autograd
from .compile import check_compile, run_compile
from .fake import check_fake, run_fake
from .kernel import check_kernel, run_kernel
from .opcheck import OPCHECK_UTILS, check_opcheck, run_opcheck
from .vmap import check_vmap, run_vmap

CheckBody = Callable[..., None]

#: Every check by name, in the order ``check_op`` runs them; the value is the check's body,
#: ``body(ctx, **options)``.
CHECKS: Mapping[str, CheckBody] = MappingProxyType(
    {
        "fake": run_fake,
        "vmap": run_vmap,
        "compile": run_compile,
        "autograd": run_autograd,
        "kernel": run_kernel,
        "opcheck": run_opcheck,
    }
)

#: The names of all checks, in run order.
ALL_CHECKS: tuple[str, ...] = tuple(CHECKS)

__all__ = [
    "ALL_CHECKS",
    "CHECKS",
    "OPCHECK_UTILS",
    "CheckBody",
    "CheckContext",
    "check_autograd",
    "check_compile",
    "check_fake",
    "check_kernel",
    "check_opcheck",
    "check_vmap",
]
