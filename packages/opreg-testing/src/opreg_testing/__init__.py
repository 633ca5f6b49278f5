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

__version__ = "0.1.0"

#: The public names, each declared once, here: name -> the module it is imported from on first
#: use. ``__all__`` is derived from it. Adding a public name: one entry here, and its import
#: in the ``TYPE_CHECKING`` block below (for type checkers, which cannot see this table; a
#: test keeps the two equal).
_EXPORTS: dict[str, str] = {
    "SampleInput": "opreg_core",
    "ALL_CHECKS": ".checks",
    "check_autocast": ".checks.autocast",
    "check_autograd": ".checks.autograd",
    "check_compile": ".checks.compile",
    "check_export": ".checks.export",
    "check_fake": ".checks.fake",
    "check_kernel": ".checks.kernel",
    "OPCHECK_UTILS": ".checks.opcheck",
    "check_opcheck": ".checks.opcheck",
    "check_vmap": ".checks.vmap",
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
    "BenchReport": ".bench",
    "BenchError": ".bench",
    "bench_op": ".bench",
}

__all__ = [*_EXPORTS, "__version__"]

if TYPE_CHECKING:
    # What type checkers see of the table above (``X as X``: an explicit re-export, since
    # ``__all__`` is not a literal); nothing here runs.
    from opreg_core import SampleInput as SampleInput

    from .bench import BenchError as BenchError
    from .bench import BenchReport as BenchReport
    from .bench import bench_op as bench_op
    from .checks import ALL_CHECKS as ALL_CHECKS
    from .checks.autocast import check_autocast as check_autocast
    from .checks.autograd import check_autograd as check_autograd
    from .checks.compile import check_compile as check_compile
    from .checks.export import check_export as check_export
    from .checks.fake import check_fake as check_fake
    from .checks.kernel import check_kernel as check_kernel
    from .checks.opcheck import OPCHECK_UTILS as OPCHECK_UTILS
    from .checks.opcheck import check_opcheck as check_opcheck
    from .checks.vmap import check_vmap as check_vmap
    from .compare import EXACT as EXACT
    from .compare import TOLERANCES as TOLERANCES
    from .compare import Mismatch as Mismatch
    from .compare import Tolerance as Tolerance
    from .compare import compare as compare
    from .compare import tolerance_for as tolerance_for
    from .devices import TRITON_CPU as TRITON_CPU
    from .devices import available_devices as available_devices
    from .errors import CheckFailure as CheckFailure
    from .errors import NoSamplesError as NoSamplesError
    from .errors import OpCheckFailed as OpCheckFailed
    from .errors import SampleInputsError as SampleInputsError
    from .interpreter import INTERPRET_ENV as INTERPRET_ENV
    from .interpreter import TritonDeviceChanges as TritonDeviceChanges
    from .interpreter import TritonUnavailable as TritonUnavailable
    from .interpreter import enable_interpreter as enable_interpreter
    from .interpreter import interpreter_enabled as interpreter_enabled
    from .interpreter import triton_device as triton_device
    from .namespace import OpNamespace as OpNamespace
    from .namespace import fresh_namespace as fresh_namespace
    from .report import CheckResult as CheckResult
    from .report import OpReport as OpReport
    from .report import Status as Status
    from .runner import check_op as check_op
    from .selection import ops_in as ops_in
    from .selection import parametrize_ops as parametrize_ops


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
