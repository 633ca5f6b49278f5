"""opreg-core: register a pure-PyTorch function once as an operator that works everywhere.

``register_vmap_op`` turns a function into a real PyTorch operator with a fake implementation
(``torch.compile``, ``torch.export``), a batching rule for ``torch.vmap`` at any nesting depth,
and autograd that composes with ``torch.func``. The op object is an ``OpOverload`` whose call
takes the dispatcher's route itself for plain tensors (``_call_path``) and goes through the
dispatcher otherwise.
"""

from ._batching import VmapInfo, VmapStats, default_wrap_inputs
from ._declaration import Default, option_values
from ._devices import device_type_name
from ._dtensor import register_sharding_rule
from ._errors import NotDifferentiableError, OpRedefinedWarning
from ._fake_check import first_call_fake_check_paused
from ._kernels import KernelHandle
from ._naming import default_name
from ._op import VmapOp
from ._options import VmapOpOptions
from ._register import register_vmap_op, unregister
from ._registry import get_op, registered_ops
from ._samples import SampleInput
from ._sharding import (
    CustomSharding,
    ElementwiseSharding,
    ReplicateSharding,
    RowwiseSharding,
    ShardingFn,
    ShardingRule,
    ShardingSpec,
    sharding_rule,
)
from ._state import Registration
from ._versions import TESTED_TORCH, FastPath, fast_paths

__version__ = "0.1.0"

__all__ = [
    "TESTED_TORCH",
    "CustomSharding",
    "Default",
    "ElementwiseSharding",
    "FastPath",
    "KernelHandle",
    "NotDifferentiableError",
    "OpRedefinedWarning",
    "Registration",
    "ReplicateSharding",
    "RowwiseSharding",
    "SampleInput",
    "ShardingFn",
    "ShardingRule",
    "ShardingSpec",
    "VmapInfo",
    "VmapOp",
    "VmapOpOptions",
    "VmapStats",
    "__version__",
    "default_name",
    "default_wrap_inputs",
    "device_type_name",
    "fast_paths",
    "first_call_fake_check_paused",
    "get_op",
    "option_values",
    "register_sharding_rule",
    "register_vmap_op",
    "registered_ops",
    "sharding_rule",
    "unregister",
]
