"""The shipped ops: ``fused_add``, ``philox_uniform``, ``philox_normal``."""

from .add import fused_add
from .philox import philox_normal, philox_uniform

__all__ = ["fused_add", "philox_normal", "philox_uniform"]
