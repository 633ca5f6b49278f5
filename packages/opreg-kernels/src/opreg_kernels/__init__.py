"""opreg-kernels: opreg ops with hand-written Triton kernels and PyTorch fallbacks.

``register_triton_op`` registers an op whose Triton launcher serves the Triton
device types (``{"cuda"}`` by default) and whose PyTorch fallback serves every
other device, and every device while Triton is absent, broken or disabled
(``OPREG_DISABLE_TRITON=1``). Importing this package never imports Triton nor
touches a GPU driver: Triton is imported when a kernel first runs.

Layout: ``_register`` (the decorator), ``_kernel_info`` (an op's Triton kernels),
``_dispatch_kernel`` (the kernel the dispatcher calls: device guard, error wrapping),
``_compiled_launch`` (launching a compiled kernel cheaply: ``fast_launch`` keyed by Triton's
own specialisation, and the shipped ops' hand-keyed launches), ``_availability`` (whether
Triton runs, and on which device types), ``_versions`` (the tested Triton releases and their
launcher layouts; ``fast_paths()`` says which fast paths this process takes), ``_private/``
(every torch/Triton internal used: one module per concern, listed by its ``__init__``), and per
shipped op ``ops/<op>/``: its registration, its PyTorch reference and its Triton kernels.
"""

from ._availability import (
    DISABLE_ENV_VAR,
    has_triton,
    register_triton_device_type,
    triton_device_types,
    triton_supports_device,
    unregister_triton_device_type,
)
from ._compiled_launch import FastKernel, fast_launch, fast_paths
from ._errors import TritonKernelError
from ._kernel_info import TritonKernelInfo, triton_kernel_info
from ._register import TritonOpOptions, register_triton_op
from ._versions import TESTED_TRITON
from .ops.fused_add import fused_add
from .ops.philox import philox_normal, philox_normal_exact, philox_uniform

__version__ = "0.1.0"

__all__ = [
    "DISABLE_ENV_VAR",
    "TESTED_TRITON",
    "FastKernel",
    "TritonKernelError",
    "TritonKernelInfo",
    "TritonOpOptions",
    "__version__",
    "fast_launch",
    "fast_paths",
    "fused_add",
    "has_triton",
    "philox_normal",
    "philox_normal_exact",
    "philox_uniform",
    "register_triton_device_type",
    "register_triton_op",
    "triton_device_types",
    "triton_kernel_info",
    "triton_supports_device",
    "unregister_triton_device_type",
]
