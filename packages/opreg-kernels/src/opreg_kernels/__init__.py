"""opreg-kernels: opreg ops with hand-written Triton kernels and PyTorch fallbacks.

``register_triton_op`` registers an op whose Triton launcher serves the Triton
device types (``{"cuda"}`` by default) and whose PyTorch fallback serves every
other device, and every device while Triton is absent, broken or disabled
(``OPREG_DISABLE_TRITON=1``). Importing this package never imports Triton nor
touches a GPU driver: Triton is imported when a kernel first runs.
"""

from .backend import (
    DISABLE_ENV_VAR,
    has_triton,
    register_triton_device_type,
    triton_device_types,
    triton_supports_device,
    unregister_triton_device_type,
)
from .errors import TritonKernelError
from .ops import fused_add, philox_normal, philox_uniform
from .register import TritonKernelInfo, register_triton_op, triton_kernel_info

__version__ = "0.1.0"

__all__ = [
    "DISABLE_ENV_VAR",
    "TritonKernelError",
    "TritonKernelInfo",
    "__version__",
    "fused_add",
    "has_triton",
    "philox_normal",
    "philox_uniform",
    "register_triton_device_type",
    "register_triton_op",
    "triton_device_types",
    "triton_kernel_info",
    "triton_supports_device",
    "unregister_triton_device_type",
]
