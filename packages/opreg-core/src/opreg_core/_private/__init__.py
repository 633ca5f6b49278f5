"""Every PyTorch internal that opreg-core relies on, and nothing else: the private boundary.

A torch upgrade that drops or changes one of these breaks here, in one place:
``tests/test_private_boundaries.py`` names each entry of :data:`INTERNALS` that no longer
resolves, and fails on any internal used outside this package. Everything else in opreg-core
uses public torch APIs only (``torch.library``, ``torch.func``, ``torch.autograd.Function``,
``torch.distributed.tensor.experimental``) and takes what it needs of these from here
(``from ._private import x``).

Layout: one module per concern. Each holds the imports of its internals, a comment per group
of them saying why they are needed (``Why:``), the torch releases they were checked on and the
public API that would replace them, the functions built on them, and its own ``INTERNALS``
(each internal named in one module). This module is the list: it re-exports every name the
rest of opreg-core uses, and its :data:`INTERNALS` joins the concerns' lists.

- ``operators``: an op *is* an ``OpOverload`` (its entry point, handle and schema);
- ``dispatcher``: dispatch keys of device types, operators by name, schemas, fragments;
- ``trees``: the tensors in (lists of) arguments and outputs;
- ``autocast``: the ``Autocast<Backend>`` keys and their exclusion guard;
- ``vmap``: batching kernels, one vmap level at a time, and the level's randomness;
- ``vmap_short_paths``: vmap levels folded into one call of ``vmap_fn``;
- ``dispatch_state``: the dispatch state below functorch levels (for ``forward_ad`` and
  ``vmap_short_paths``);
- ``direct_call``: what an op's call reads before it takes the dispatcher's route itself;
- ``autograd``: single-level autograd Functions, kernels below autograd;
- ``forward_ad``: a Function's jvp rule under dual levels and ``torch.func`` levels;
- ``aliasing``: storage identity; ``sharding``: DTensor's caches; ``fake``: a fake run
  under a ``FakeTensorMode``.

Names that a kernel uses on every call are bound once in their concern module (aliases, not
wrappers) and re-exported here as the same objects, so the boundary adds no Python frame to a
call of an op.
"""

from __future__ import annotations

from . import (
    aliasing,
    autocast,
    autograd,
    direct_call,
    dispatch_state,
    dispatcher,
    fake,
    forward_ad,
    operators,
    sharding,
    trees,
    vmap,
    vmap_short_paths,
)
from .aliasing import storage_id
from .autocast import (
    any_autocast_enabled,
    autocast_capable_device_types,
    autocast_dispatch_key,
    excluding_dispatch_key,
)
from .autograd import (
    AFTER_AD_INPLACE_OR_VIEW_KEYSET,
    AFTER_AUTOGRAD_KEYSET,
    AutoDispatchBelowADInplaceOrView,
    AutoDispatchBelowAutograd,
    apply_function,
    below_autograd,
    enable_single_level_autograd_function,
    function_class,
    set_backward,
)
from .direct_call import (
    any_requires_grad,
    autograd_excluded,
    bump_versions,
    compiling,
    dispatch_keys_raw,
    functorch_transforms_active,
    inplace_or_view_excluded,
    profiler_enabled,
)
from .dispatch_state import pop_layer, push_layer
from .dispatcher import Library, dispatch_key_for_device, operator_exists, parse_schema
from .fake import fake_run
from .forward_ad import (
    call_jvp_rule,
    forward_ad_level,
    forward_mode_ad_active,
    grad_modes,
    tangent_flags,
    transform_grad_modes,
)
from .operators import (
    OpOverload,
    OpOverloadPacket,
    entry_point,
    new_op_object,
    overload_schema,
    redispatch_boxed,
)
from .sharding import clear_sharding_caches, forget_sharding_strategies
from .trees import tree_leaves, tree_map_only
from .vmap import (
    add_batch_dim,
    call_one_level_down,
    current_vmap_level,
    peek_interpreter_stack,
    unwrap_batched,
    vmap_randomness,
)
from .vmap_short_paths import (
    VmapLevelKeys,
    call_below_vmap_levels,
    dispatch_modes_active,
    dynamic_layer_depth,
    function_modes_active,
    jit_tracing,
    vmap_level_keys,
)

__all__ = [
    "AFTER_AD_INPLACE_OR_VIEW_KEYSET",
    "AFTER_AUTOGRAD_KEYSET",
    "INTERNALS",
    "AutoDispatchBelowADInplaceOrView",
    "AutoDispatchBelowAutograd",
    "Library",
    "OpOverload",
    "OpOverloadPacket",
    "VmapLevelKeys",
    "add_batch_dim",
    "any_autocast_enabled",
    "any_requires_grad",
    "apply_function",
    "autocast_capable_device_types",
    "autocast_dispatch_key",
    "autograd_excluded",
    "below_autograd",
    "bump_versions",
    "call_below_vmap_levels",
    "call_jvp_rule",
    "call_one_level_down",
    "clear_sharding_caches",
    "compiling",
    "current_vmap_level",
    "dispatch_key_for_device",
    "dispatch_keys_raw",
    "dispatch_modes_active",
    "dynamic_layer_depth",
    "enable_single_level_autograd_function",
    "entry_point",
    "excluding_dispatch_key",
    "fake_run",
    "forget_sharding_strategies",
    "forward_ad_level",
    "forward_mode_ad_active",
    "function_class",
    "function_modes_active",
    "functorch_transforms_active",
    "grad_modes",
    "inplace_or_view_excluded",
    "jit_tracing",
    "new_op_object",
    "operator_exists",
    "overload_schema",
    "parse_schema",
    "peek_interpreter_stack",
    "pop_layer",
    "profiler_enabled",
    "push_layer",
    "redispatch_boxed",
    "set_backward",
    "storage_id",
    "tangent_flags",
    "transform_grad_modes",
    "tree_leaves",
    "tree_map_only",
    "unwrap_batched",
    "vmap_level_keys",
    "vmap_randomness",
]

#: Dotted names of every internal opreg-core uses, each named once, by its concern's module
#: (attributes that exist only on instances are listed as the instance attribute of the
#: class: a method of the class assigns them).
INTERNALS: tuple[str, ...] = (
    *operators.INTERNALS,
    *dispatcher.INTERNALS,
    *trees.INTERNALS,
    *autocast.INTERNALS,
    *vmap.INTERNALS,
    *vmap_short_paths.INTERNALS,
    *dispatch_state.INTERNALS,
    *direct_call.INTERNALS,
    *autograd.INTERNALS,
    *forward_ad.INTERNALS,
    *aliasing.INTERNALS,
    *sharding.INTERNALS,
    *fake.INTERNALS,
)
