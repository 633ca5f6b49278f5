"""opreg-testing: prove that an op is consistent everywhere it can run.

Checks (each raises :class:`CheckFailure` naming the op, the check, the sample and the first
mismatch, and returns a :class:`CheckResult` otherwise):

- :func:`check_fake`: the fake implementation predicts the real output (static and dynamic shapes);
- :func:`check_vmap`: ``vmap(op)`` equals the op stacked over the batch (in_dims 0/-1/middle/None,
  nested 2-3 levels) and reports whether the fast batching rule ran;
- :func:`check_compile`: ``torch.compile(fullgraph=True)`` of the op and of ``vmap(op)``
  matches eager;
- :func:`check_autograd`: gradcheck in float64, ``grad(vmap)`` and ``vmap(grad)``;
- :func:`check_kernel`: a registered kernel (e.g. Triton) against the fallback;
- :func:`check_opcheck`: ``torch.library.opcheck``.

:func:`check_op` runs a set of them and returns an :class:`OpReport`. The pytest plugin
(:mod:`opreg_testing.plugin`) and the ``opreg check`` command build on these.
"""

from opreg_core import SampleInput

from .checks import (
    ALL_CHECKS,
    OPCHECK_UTILS,
    check_autograd,
    check_compile,
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
    TritonDevice,
    TritonUnavailable,
    enable_interpreter,
    interpreter_enabled,
    triton_device,
)
from .namespace import OpNamespace, fresh_namespace
from .report import CheckResult, OpReport, Status
from .runner import check_op
from .selection import ops_in, parametrize_ops

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
    "TritonDevice",
    "TritonUnavailable",
    "__version__",
    "available_devices",
    "check_autograd",
    "check_compile",
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
