"""opreg-testing: prove that an op is consistent everywhere it can run.

Checks (each raises :class:`CheckFailure` naming the op, the check, the sample and the first
mismatch, and returns a :class:`CheckResult` otherwise):

- :func:`check_fake`: the fake implementation predicts the real output (static and dynamic shapes);
- :func:`check_vmap`: ``vmap(op)`` equals the op applied to each batch entry and stacked (in_dims
  0/-1/middle/None, nested 2-3 levels) and reports whether the fast batching rule ran;
- :func:`check_compile`: ``torch.compile(fullgraph=True)`` of the op and of ``vmap(op)``
  matches eager;
- :func:`check_export`: a program calling the op survives ``torch.export`` save and load and
  matches eager (and ``vmap(op)``), and the op's module is importable where it loads;
- :func:`check_autograd`: gradcheck and gradgradcheck in float64 (``gradgrad=False`` skips the
  second order), ``grad(vmap)`` and ``vmap(grad)``;
- :func:`check_kernel`: a registered kernel (e.g. Triton) against the fallback;
- :func:`check_opcheck`: ``torch.library.opcheck``;
- :func:`check_autocast`: an op with an ``autocast`` rule under ``torch.autocast``: output,
  fake and gradients those of the fallback on the inputs cast as the rule says.

The entries of a vmap batch differ from the sample in value, not only in order (or are the
op's own samples of the same shapes: ``batch_entries``). The fake, vmap and kernel checks also
run every sample in non-contiguous layout variants (transposed, strided, offset; ``layouts``).
With ``check_op(op, device="triton-cpu")`` every check runs each Triton op's Triton kernel on
CPU, through Triton's interpreter; on ``"cpu"`` a Triton op runs its PyTorch fallback.

:func:`check_op` runs a set of them and returns an :class:`OpReport`. The pytest plugin
(:mod:`opreg_testing.plugin`) and the ``opreg check`` command build on these.
"""

import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opreg_core import SampleInput

    from .checks import (
        ALL_CHECKS,
        OPCHECK_UTILS,
        check_autocast,
        check_autograd,
        check_compile,
        check_export,
        check_fake,
        check_kernel,
        check_opcheck,
        check_vmap,
    )
    from .compare import EXACT, TOLERANCES, Mismatch, Tolerance, compare, tolerance_for
    from .devices import TRITON_CPU, available_devices
    from .errors import CheckFailure, NoSamplesError, OpCheckFailed, SampleInputsError
    from .interpreter import (
        INTERPRET_ENV,
        TritonDeviceChanges,
        TritonUnavailable,
        enable_interpreter,
        interpreter_enabled,
        triton_device,
    )
    from .namespace import OpNamespace, fresh_namespace
    from .report import CheckResult, OpReport, Status
    from .runner import check_op
    from .selection import ops_in, parametrize_ops


def __getattr__(name: str) -> Any:
    """Import the public names on first use (PEP 562).

    ``import opreg_testing`` (which the pytest plugin's entry point triggers in every pytest
    run of the environment) must not import torch: each public name is imported from its
    module when first asked for, then cached in the package.
    """
    import importlib

    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    """The package's module type: a public name beats a submodule of the same name.

    Importing ``opreg_testing.compare`` (the module) sets the package attribute ``compare``;
    the package exports the function ``compare`` under that name, as it did when it imported
    everything eagerly.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and _EXPORTS.get(name) == f".{name}":
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

#: Where each public name lives (keep in step with the imports above and ``__all__``).
_EXPORTS: dict[str, str] = {
    "SampleInput": "opreg_core",
    "ALL_CHECKS": ".checks",
    "OPCHECK_UTILS": ".checks",
    "check_autocast": ".checks",
    "check_autograd": ".checks",
    "check_compile": ".checks",
    "check_export": ".checks",
    "check_fake": ".checks",
    "check_kernel": ".checks",
    "check_opcheck": ".checks",
    "check_vmap": ".checks",
    "EXACT": ".compare",
    "TOLERANCES": ".compare",
    "Mismatch": ".compare",
    "Tolerance": ".compare",
    "compare": ".compare",
    "tolerance_for": ".compare",
    "TRITON_CPU": ".devices",
    "available_devices": ".devices",
    "CheckFailure": ".errors",
    "NoSamplesError": ".errors",
    "OpCheckFailed": ".errors",
    "SampleInputsError": ".errors",
    "INTERPRET_ENV": ".interpreter",
    "TritonDeviceChanges": ".interpreter",
    "TritonUnavailable": ".interpreter",
    "enable_interpreter": ".interpreter",
    "interpreter_enabled": ".interpreter",
    "triton_device": ".interpreter",
    "OpNamespace": ".namespace",
    "fresh_namespace": ".namespace",
    "CheckResult": ".report",
    "OpReport": ".report",
    "Status": ".report",
    "check_op": ".runner",
    "ops_in": ".selection",
    "parametrize_ops": ".selection",
}

__version__ = "0.1.0"

__all__ = [
    "ALL_CHECKS",
    "EXACT",
    "INTERPRET_ENV",
    "OPCHECK_UTILS",
    "TOLERANCES",
    "TRITON_CPU",
    "CheckFailure",
    "CheckResult",
    "Mismatch",
    "NoSamplesError",
    "OpCheckFailed",
    "OpNamespace",
    "OpReport",
    "SampleInput",
    "SampleInputsError",
    "Status",
    "Tolerance",
    "TritonDeviceChanges",
    "TritonUnavailable",
    "__version__",
    "available_devices",
    "check_autocast",
    "check_autograd",
    "check_compile",
    "check_export",
    "check_fake",
    "check_kernel",
    "check_op",
    "check_opcheck",
    "check_vmap",
    "compare",
    "enable_interpreter",
    "fresh_namespace",
    "interpreter_enabled",
    "ops_in",
    "parametrize_ops",
    "tolerance_for",
    "triton_device",
]
