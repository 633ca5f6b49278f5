"""Every PyTorch internal that opreg-core relies on, and nothing else.

A torch upgrade that drops or changes one of these breaks here, in one place:
``tests/test_private_boundaries.py`` names each entry of :data:`INTERNALS` that no longer
resolves, and fails on any internal used outside this module. Each section says why its
internals are needed and which public API would replace them. Everything else in opreg-core
uses public torch APIs only (``torch.library``, ``torch.func``, ``torch.autograd.Function``,
``torch.distributed.tensor.experimental``).
Names that a kernel uses on every call are bound here once (aliases, not wrappers), so the
boundary adds no Python frame to a call of an op.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar, cast

import torch
import torch._C._functorch as _functorch
import torch.autograd.forward_ad as _forward_ad

# -- Autograd ------------------------------------------------------------------------------
# Why: the ``Autograd`` kernel applies a *single-level* autograd Function, which records on the
# grad level's wrapper tensors as PyTorch's own ATen kernels do; this is what makes
# ``torch.func.grad``/``jacrev``/``vjp`` work where ``torch.library.register_autograd`` (through
# ``custom_function_call``) raises. The kernels redispatch below autograd with the guards and
# keysets of the dispatcher.
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: ``torch.library.register_autograd`` composing with ``torch.func``, and
# public below-autograd redispatch guards.
from torch._functorch import autograd_function as _autograd_function

# -- Forward-mode AD (see that section below): torch.func's jvp nesting count.
from torch._functorch import eager_transforms as _eager_transforms

# -- Operators -------------------------------------------------------------------------------
# Why: an opreg op *is* an ``OpOverload`` (so opcheck, torch.compile and torch.export treat it as
# the operator), whose ``__call__`` is the overload's C++ entry point ``_op`` (no Python frame
# per call), and whose kernels redispatch through ``_handle``; the sharding rules read the
# operator's ``_schema``; the name check compares with ``OpOverloadPacket`` attributes.
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: exported ``OpOverload``/``OpOverloadPacket`` types, a ``schema`` property,
# and a supported way to subclass an overload (or a call hook on ``torch.library.custom_op``
# that costs no Python frame).
from torch._ops import OpOverload, OpOverloadPacket
from torch.autograd.function import _SingleLevelFunction

# -- Trees -------------------------------------------------------------------------------------
# Why: lists of tensors in arguments and outputs are walked and rebuilt.
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: ``torch.utils.pytree`` (not importable in torch 2.13).
from torch.utils._pytree import tree_leaves, tree_map_only

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
    "profiler_enabled",
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

#: Dotted names of every internal used here (attributes that exist only on instances are
#: listed as the instance attribute of the class: a method of the class assigns them).
INTERNALS: tuple[str, ...] = (
    "torch._ops.OpOverload",
    "torch._ops.OpOverload._op",
    "torch._ops.OpOverload._handle",
    "torch._ops.OpOverload._schema",
    "torch._ops.OpOverloadPacket",
    "torch._C._dispatch_key_for_device",
    "torch._C._dispatch_find_schema_or_throw",
    "torch._C.parse_schema",
    "torch._C._AutoDispatchBelowAutograd",
    "torch._C._any_requires_grad",
    "torch._C._increment_version",
    "torch._C._AutoDispatchBelowADInplaceOrView",
    "torch._C._after_autograd_keyset",
    "torch._C._after_ADInplaceOrView_keyset",
    "torch._C._are_functorch_transforms_active",
    "torch._C._is_fwd_grad_enabled",
    "torch._C._ForceDispatchKeyGuard",
    "torch._C._dispatch_tls_local_include_set",
    "torch._C._dispatch_tls_local_exclude_set",
    "torch._C.DispatchKeySet",
    "torch._C.DispatchKeySet.raw_repr",
    "torch._C.DispatchKeySet.from_raw_repr",
    "torch._C.DispatchKey",
    "torch._C._functorch.tls_set_vmap_excluded",
    "torch._C._functorch._add_batch_dim",
    "torch._C._functorch._unwrap_batched",
    "torch._C._functorch._wrap_for_grad",
    "torch._C._functorch._unwrap_for_grad",
    "torch._C._functorch.maybe_current_level",
    "torch._C._functorch.peek_interpreter_stack",
    "torch._C._functorch.pop_dynamic_layer_stack",
    "torch._C._functorch.get_dynamic_layer_stack_depth",
    "torch._C._len_torch_dispatch_stack",
    "torch._C._len_torch_function_stack",
    "torch._C._is_tracing",
    "torch._C._dispatch_keys",
    "torch.autograd.profiler._is_profiler_enabled",
    "torch.compiler._is_compiling_flag",
    "torch._C._dispatch_tls_is_dispatch_key_excluded",
    "torch._C.DispatchKey.AutogradFunctionality",
    "torch._C._functorch.push_dynamic_layer_stack",
    "torch._C._functorch.CVmapInterpreterPtr",
    "torch._C._functorch.CJvpInterpreterPtr",
    "torch._C._functorch.RandomnessType",
    "torch._C._functorch.CVmapInterpreterPtr.randomness",
    "torch._C._functorch.TransformType",
    "torch._functorch.autograd_function.enable_single_level_autograd_function",
    "torch._functorch.eager_transforms.JVP_NESTING",
    "torch.autograd.function._SingleLevelFunction",
    "torch.autograd.function._SingleLevelFunction._backward_cls",
    "torch.autograd.forward_ad._current_level",
    "torch.autograd.forward_ad._set_fwd_grad_enabled",
    "torch.library.Library._destroy",
    "torch.UntypedStorage._cdata",
    "torch.utils._pytree.tree_leaves",
    "torch.utils._pytree.tree_map_only",
    "torch.distributed.tensor.DTensor._op_dispatcher",
    "torch.distributed.tensor.debug._clear_sharding_prop_cache",
    "torch.distributed.tensor._sharding_prop.ShardingPropagator.propagate_op_sharding",
    "torch._C._clear_DTensor_sharding_propagator_cache",
    "torch._C._is_any_autocast_enabled",
    "torch._C._ExcludeDispatchKeyGuard",
    "torch._C._get_privateuse1_backend_name",
    "torch._subclasses.fake_tensor.FakeTensorMode",
    "torch._subclasses.fake_tensor.FakeTensorMode.from_tensor",
)

_OP = TypeVar("_OP", bound=OpOverload[Any, Any])


def entry_point(overload: OpOverload[Any, Any]) -> Callable[..., Any]:
    """The C++ entry point of an overload: calling it is a direct call into the dispatcher."""
    call: Callable[..., Any] = overload._op
    return call


def redispatch_boxed(overload: OpOverload[Any, Any]) -> Callable[..., Any]:
    """``redispatch(keyset, *args, **kwargs)`` of an overload, for a kernel ``with_keyset``."""
    return cast(Callable[..., Any], overload._handle.redispatch_boxed)


def overload_schema(overload: OpOverload[Any, Any]) -> torch.FunctionSchema:
    """The schema of an overload (argument names, return types)."""
    return overload._schema


def new_op_object(cls: type[_OP], overload: OpOverload[Any, Any]) -> _OP:
    """An instance of ``cls`` (an ``OpOverload`` subclass whose ``__call__`` is the overload's
    entry point) that is the operator ``overload``: ``OpOverload.__init__`` would register a
    new overload, so the instance is made without it and takes the overload's state (its
    ``__dict__``: the schema, handle, names and caches torch reads from an overload)."""
    op = object.__new__(cls)
    op.__dict__.update(overload.__dict__)
    return op


# -- The dispatcher ----------------------------------------------------------------------------
# Why: a device type's backend dispatch key (where ``device_types`` registers kernels), whether
# a name is taken by an operator opreg did not register, a schema parsed before anything is
# registered, and destroying a ``torch.library.Library`` fragment (``unregister``,
# re-registration).
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: ``torch.library`` queries for dispatch keys and operators, a public
# schema parser, and ``Library.destroy()``.


def dispatch_key_for_device(device_type: str) -> str:
    """The backend dispatch key name of a device type (``"cuda"`` -> ``"CUDA"``); RuntimeError
    for a device type this torch build does not know."""
    return str(torch._C._dispatch_key_for_device(device_type))


parse_schema: Callable[[str], torch.FunctionSchema] = torch._C.parse_schema


def operator_exists(qualname: str) -> bool:
    """Whether the dispatcher knows an operator (default overload) of this name."""
    try:
        torch._C._dispatch_find_schema_or_throw(qualname, "")
    except RuntimeError:
        return False
    return True


class Library:
    """A typed wrapper of ``torch.library.Library`` (a ``FRAGMENT`` of one namespace)."""

    def __init__(self, namespace: str) -> None:
        self._lib = torch.library.Library(namespace, "FRAGMENT")  # type: ignore[no-untyped-call]

    def define(self, schema: str) -> None:
        self._lib.define(schema)  # type: ignore[no-untyped-call]

    def impl(
        self,
        opname: str,
        kernel: Callable[..., Any],
        dispatch_key: str,
        *,
        with_keyset: bool = False,
        allow_override: bool = False,
    ) -> None:
        extra = {"allow_override": True} if allow_override and _IMPL_ALLOWS_OVERRIDE else {}
        self._lib.impl(opname, kernel, dispatch_key, with_keyset=with_keyset, **extra)  # type: ignore[no-untyped-call]

    def register_fake(self, qualname: str, fake: Callable[..., Any]) -> None:
        torch.library.register_fake(qualname, fake, lib=self._lib)

    def destroy(self) -> None:
        self._lib._destroy()  # type: ignore[no-untyped-call]


def _impl_allows_override() -> bool:

    return "allow_override" in inspect.signature(torch.library.Library.impl).parameters


_IMPL_ALLOWS_OVERRIDE = _impl_allows_override()


# -- Autocast -----------------------------------------------------------------------------------
# Why: an op's ``autocast`` rule is a kernel on the device type's ``Autocast<Backend>`` key that
# casts the inputs and calls the op again with that one key excluded, as ATen's autocast
# wrappers (``ExcludeDispatchKeyGuard``) and ``torch.library.register_autocast`` do; the key
# exists only for some device types; and the direct call must send a call of such an op to the
# dispatcher while any autocast region is active (one C call, no Python frame).
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: ``torch.library.register_autocast`` with the autocast dtype as its cast
# target (it takes a fixed dtype per device type), a public "is any autocast enabled" query.

#: Whether an autocast region is enabled for some device type.
any_autocast_enabled: Callable[[], bool] = torch._C._is_any_autocast_enabled


def autocast_dispatch_key(device_type: str) -> str | None:
    """The autocast dispatch key of a device type (``"cpu"`` -> ``"AutocastCPU"``), or None
    where this torch build has none for it."""
    try:
        key = "Autocast" + str(torch._C._dispatch_key_for_device(device_type))
    except RuntimeError:
        return None
    return key if key in torch._C.DispatchKey.__members__ else None


def autocast_capable_device_types() -> tuple[str, ...]:
    """The device types that have an autocast dispatch key in this torch build."""
    names = ("cpu", "cuda", "xpu", "mps", "hpu", "ipu", torch._C._get_privateuse1_backend_name())
    return tuple(name for name in names if autocast_dispatch_key(name) is not None)


def excluding_dispatch_key(key: str) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """A maker of guards under which the dispatcher skips ``key`` (an autocast key: no second
    cast); the key set is built once, here."""
    keys = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))
    return functools.partial(torch._C._ExcludeDispatchKeyGuard, keys)


# -- vmap ----------------------------------------------------------------------------------------
# Why: opreg's batching rules are kernels on ``FuncTorchBatched`` that unwrap and re-wrap the
# level's batched tensors and send the batched call one level down; ``torch.library.register_vmap``
# does the same through these functions, but with one Python rule per level (opreg folds every
# level into one ``vmap_fn`` call) and without ``max_vmap_level``.
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: a ``torch.library`` batching-rule API for nested levels.

_tls_set_vmap_excluded: Callable[[bool], None] = _functorch.tls_set_vmap_excluded  # type: ignore[attr-defined]
add_batch_dim = _functorch._add_batch_dim
unwrap_batched = _functorch._unwrap_batched
peek_interpreter_stack = _functorch.peek_interpreter_stack


def current_vmap_level() -> int:
    """Level of the innermost active functorch transform (a vmap, inside a batching kernel)."""
    level = _functorch.maybe_current_level()
    if level is None:
        raise RuntimeError("opreg: a batching rule ran outside of torch.vmap")
    return level


def call_one_level_down(fn: Callable[..., Any], args: Any, kwargs: dict[str, Any]) -> Any:
    """Call ``fn`` one vmap level down: with ``FuncTorchBatched`` excluded, functorch's
    dynamic-layer keys pop the current level (the lowering ``torch.library.register_vmap``
    uses, through a cheaper TLS switch than a guard object)."""
    _tls_set_vmap_excluded(True)
    try:
        return fn(*args, **kwargs)
    finally:
        _tls_set_vmap_excluded(False)


# Why: ``vmap_wrap_inputs`` is told the ``randomness`` of the vmap level it handles, which
# only functorch's interpreter of that level (top of its stack, a ``CVmapInterpreterPtr``)
# holds, as a ``RandomnessType``.
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: the ``info.randomness`` that ``torch.library.register_vmap`` passes its
# rule (opreg's batching kernels are no such rules: see the vmap section above).
_RANDOMNESS_NAMES = {
    _functorch.RandomnessType.Error: "error",
    _functorch.RandomnessType.Same: "same",
    _functorch.RandomnessType.Different: "different",
}


def vmap_randomness() -> str:
    """``randomness`` (``"error"``, ``"same"`` or ``"different"``) of the vmap level being
    processed (inside a batching kernel)."""
    top = _functorch.CVmapInterpreterPtr(_functorch.peek_interpreter_stack())
    return _RANDOMNESS_NAMES[top.randomness()]


# -- vmap short paths ---------------------------------------------------------------------------
# Why: where nothing below the vmap levels needs the dispatcher, opreg's vmap rule folds two or
# more vmap levels into one call of ``vmap_fn`` that it makes itself, instead of dispatching the
# batched op through each level (a Python rule and a trip through functorch per level, plus the
# batched op's autograd kernel and ``vmap_fn`` as a kernel). It must then do by hand what
# functorch does for an operation sent below the levels: pop them (``pop_dynamic_layer_stack``)
# and give ``vmap_fn`` the dispatch state below them (``_ForceDispatchKeyGuard``, key sets
# through their raw representation). Which keys a vmap level adds to that state is not
# hard-coded: :func:`vmap_level_keys` measures it once through the dispatcher (a probe
# operator, the real path). The preconditions of both short paths (this fold, and the batched
# op's twin without an autograd kernel at the last level, which needs no internal of its own)
# read the depth of functorch's level stack, the mode stacks and jit tracing.
# A speed path: taken only on a torch release CI tests (``_versions``); otherwise the op takes
# the dispatcher's route, with the same results.
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: a ``torch.library`` batching-rule API for nested levels with a
# "call below every level" helper (``torch._functorch.pyfunctorch``'s ``interpreter.lower()``
# is the Python counterpart for higher-order operators, but it leaves the dispatch state alone,
# which is right there only because those never enter functorch's C++ level processing), and
# public ``torch.utils._python_dispatch`` / ``torch.overrides`` queries for active modes.

dynamic_layer_depth: Callable[[], int] = _functorch.get_dynamic_layer_stack_depth
dispatch_modes_active: Callable[[], int] = torch._C._len_torch_dispatch_stack
function_modes_active: Callable[[], int] = torch._C._len_torch_function_stack
#: Whether torch.jit is tracing (``torch.jit.is_tracing`` is the public, untyped, slower form).
jit_tracing: Callable[[], bool] = torch._C._is_tracing
_pop_layer = _functorch.pop_dynamic_layer_stack
_push_layer = _functorch.push_dynamic_layer_stack
_ForceDispatchKeyGuard = torch._C._ForceDispatchKeyGuard
_tls_include: Callable[[], Any] = torch._C._dispatch_tls_local_include_set
_tls_exclude: Callable[[], Any] = torch._C._dispatch_tls_local_exclude_set


#: The innermost open ``torch.autograd.forward_ad`` dual level, -1 with none open (dual
#: tensors may exist at 0 or above). A C-level partial: no Python frame on a call's path.
forward_ad_level: Callable[[], int] = functools.partial(getattr, _forward_ad, "_current_level")


class VmapLevelKeys:
    """What entering a vmap level does to the dispatch state, as measured by
    :func:`vmap_level_keys`: the bits it adds to the included and excluded sets (raw
    representations: a key set's ``-`` keeps backend bits, and the state below must be the
    caller's exactly)."""

    def __init__(self, included: int, excluded: int) -> None:
        self.included = included
        self.excluded = excluded
        #: (include, exclude) at a level -> the state below it, for the last state seen.
        self._last: tuple[int, int, tuple[Any, Any]] | None = None

    def state_below(self) -> tuple[Any, Any] | None:
        """The dispatch state (included, excluded) that functorch gives an operation sent
        below the vmap levels, from the current one (inside a level being processed): the
        current one without what the levels added, which is the caller's own state unless the
        caller had itself excluded some of those keys (inference mode or a dispatch mode, which
        the short path checks first). None when the current state lacks something a level adds
        (not inside a vmap level as measured: the dispatcher must decide)."""
        include = _tls_include().raw_repr()
        exclude = _tls_exclude().raw_repr()
        last = self._last  # one read: thread-safe
        if last is not None and last[0] == include and last[1] == exclude:
            return last[2]
        if include & self.included != self.included or exclude & self.excluded != self.excluded:
            return None
        below = (
            _from_raw(include & ~self.included),
            _from_raw(exclude & ~self.excluded),
        )
        self._last = (include, exclude, below)
        return below


_from_raw: Callable[[int], Any] = torch._C.DispatchKeySet.from_raw_repr


_LEVEL_KEYS: list[VmapLevelKeys | None] = []


def vmap_level_keys() -> VmapLevelKeys | None:
    """The keys a vmap level adds to the dispatch state, measured once through the dispatcher.

    A probe operator (destroyed afterwards) is vmapped from a fresh state; its batching rule
    records the state at the level, and its kernel, reached one level down through the
    dispatcher as a batched op is, the state below. None if the probe fails or shows
    something the short path does not expect (it is then never taken). Measured only from a
    plain state (no transform or mode active); None, and nothing cached, otherwise."""
    if not _LEVEL_KEYS:
        if (
            torch._C._are_functorch_transforms_active()
            or dispatch_modes_active()
            or function_modes_active()
        ):
            return None
        try:
            _LEVEL_KEYS.append(_probe_level_keys())
        except Exception:
            _LEVEL_KEYS.append(None)
    return _LEVEL_KEYS[0]


_PROBE_NAMESPACE = "opreg_level_probe"


def _probe_level_keys() -> VmapLevelKeys | None:
    seen: dict[str, tuple[Any, Any]] = {}
    lib = torch.library.Library(_PROBE_NAMESPACE, "FRAGMENT")  # type: ignore[no-untyped-call]
    try:
        lib.define("probe(Tensor x) -> Tensor")  # type: ignore[no-untyped-call]
        op = getattr(torch.ops, _PROBE_NAMESPACE).probe.default

        def below(x: torch.Tensor) -> torch.Tensor:
            seen["below"] = (_tls_include(), _tls_exclude())
            return x.clone()

        def rule(x: torch.Tensor) -> torch.Tensor:
            seen["level"] = (_tls_include(), _tls_exclude())
            level = current_vmap_level()
            inner, dim = unwrap_batched(x, level)
            assert dim is not None  # the probe batches its only argument
            return add_batch_dim(call_one_level_down(op, (inner,), {}), dim, level)

        lib.impl("probe", below, "CompositeExplicitAutograd")  # type: ignore[no-untyped-call]
        lib.impl("probe", rule, "FuncTorchBatched")  # type: ignore[no-untyped-call]
        # A fresh state: nothing excluded but autocast (as functorch leaves it).
        with _ForceDispatchKeyGuard(
            _tls_include() | _DEFAULT_INCLUDED, _tls_exclude() & _AUTOCAST_KEYS
        ):
            torch.vmap(op)(torch.zeros(2))
    finally:
        lib._destroy()  # type: ignore[no-untyped-call]
    at_include, at_exclude = (keys.raw_repr() for keys in seen["level"])
    below_include, below_exclude = (keys.raw_repr() for keys in seen["below"])
    if below_include & ~at_include or below_exclude & ~at_exclude:
        return None  # the level removed a key: not the add-only change assumed here
    return VmapLevelKeys(at_include & ~below_include, at_exclude & ~below_exclude)


def call_below_vmap_levels(
    count: int, below: tuple[Any, Any], fn: Callable[..., Any], *args: Any
) -> Any:
    """``fn(*args)`` with the top ``count`` functorch levels (vmap levels, the top one being
    processed) popped, in the dispatch state ``below`` (from
    :meth:`VmapLevelKeys.state_below`): what :func:`call_one_level_down` gives an operator
    after its last level, for a plain Python function, without a trip through the dispatcher."""
    saved = [_pop_layer() for _ in range(count)]
    try:
        with _ForceDispatchKeyGuard(*below):
            return fn(*args)
    finally:
        for layer in reversed(saved):
            _push_layer(layer)


# -- The direct call ----------------------------------------------------------------------------
# Why: an op's call takes the dispatcher's route itself when nothing could route it differently
# (``_direct_call``): it reads the dispatch key set of each tensor (plain dense tensors of one
# device type: no subclass, view bit, sparse or nested layout, batched or functional wrapper),
# whether functorch transforms or the profiler are active, and whether autograd is excluded
# below an outer kernel.
# A speed path: taken only on a torch release CI tests (``_versions``); otherwise the op takes
# the dispatcher's route, with the same results.
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: a ``torch.library`` fast path for Python kernels (one crossing into Python
# per call, as ``torch.autograd.Function.apply`` has), or public queries for these states.

functorch_transforms_active: Callable[[], bool] = torch._C._are_functorch_transforms_active
#: Whether a tensor among the arguments (or in a list of tensors among them) requires grad.
any_requires_grad: Callable[..., bool] = torch._C._any_requires_grad
#: Whether a profiler started from Python is on: the flag ``torch.autograd.profiler`` sets on
#: every profiler's start, which Inductor's Triton launchers read too (a C-level partial:
#: 34 ns a call on the 2-core VM, against 49 ns for ``torch._C._autograd._profiler_enabled``).
profiler_enabled: Callable[[], bool] = functools.partial(
    getattr, torch.autograd.profiler, "_is_profiler_enabled"
)
#: ``torch.compiler.is_compiling()`` without its two Python frames: the flag it returns, set
#: while ``torch.export`` traces (non-strict export runs the op object's call) and, on torch
#: 2.13 to 2.15 (not 2.11), in code Dynamo traces (which puts the op object into its graph
#: without running its call).
compiling: Callable[[], bool] = functools.partial(getattr, torch.compiler, "_is_compiling_flag")
#: Whether autograd is excluded from dispatch here (below an outer kernel's autograd, or in
#: inference mode): the dispatcher would not run an op's ``Autograd`` kernel. (A partial: no
#: Python frame.)
autograd_excluded: Callable[[], bool] = functools.partial(
    torch._C._dispatch_tls_is_dispatch_key_excluded, torch._C.DispatchKey.AutogradFunctionality
)
#: Bump the version counters of a sequence of tensors, as a mutating op's ``ADInplaceOrView``
#: kernel does (``torch.autograd.graph.increment_version`` is the public form, a Python frame
#: more; an inference tensor has no counter and is left alone).
bump_versions: Callable[[Sequence[torch.Tensor]], None] = torch._C._increment_version
#: Whether the ``ADInplaceOrView`` key is excluded from dispatch here (below a mutating op's
#: version bump): the dispatcher would bump no version counter. (A partial: no Python frame.)
inplace_or_view_excluded: Callable[[], bool] = functools.partial(
    torch._C._dispatch_tls_is_dispatch_key_excluded, torch._C.DispatchKey.ADInplaceOrView
)


_dispatch_keys: Callable[[torch.Tensor], Any] = torch._C._dispatch_keys


def dispatch_keys_raw(tensor: torch.Tensor) -> int:
    """The dispatch key set of a tensor, as an int (equal sets, equal ints). (No ``cast``: the
    direct call reads it per tensor, and ``typing.cast`` is a Python call.)"""
    raw: int = _dispatch_keys(tensor).raw_repr()
    return raw


# -- Autograd kernels (see the import section above) ------------------------------------------


#: What compiled autograd asks of a Function class and ``torch.autograd.Function`` defines
#: (``_SingleLevelFunction`` does not): the key of its graph nodes' compiled backward.
_COMPILED_AUTOGRAD: dict[str, Any] = {
    "_compiled_autograd_key": staticmethod(lambda ctx: (ctx._autograd_function_id,)),
}


def function_class(name: str, methods: dict[str, Any], *, node_calls_backward: bool) -> Any:
    """A single-level autograd Function class with ``methods`` (staticmethods), whose graph
    node calls the class's ``backward`` itself (``node_calls_backward``; a speed path, taken
    on a tested torch only: otherwise autograd's ``BackwardCFunction.apply`` calls it).

    The engine calls ``apply`` on the node (``PyNode::apply``), which ``BackwardCFunction``
    defines in Python: it looks the user's function up (``_get_user_fn``, for ``vjp``) and
    then calls it, two Python frames on every backward before the backward runs (on CUDA,
    on autograd's device thread). opreg's Functions define no ``vjp`` and no
    ``boxed_grads_call``, so the node's ``apply`` is their ``backward``; ``set_backward``
    keeps the two the same. (Compiled autograd calls ``_forward_cls.backward``, the same
    function.) Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
    Public replacement: an autograd Function whose node calls ``backward`` without a Python
    trampoline.
    """
    function: Any = type(name, (_SingleLevelFunction,), {**methods, **_COMPILED_AUTOGRAD})
    if node_calls_backward:
        function._backward_cls.apply = methods["backward"].__func__
    return function


def set_backward(function: Any, backward: Callable[..., Any]) -> None:
    """Make ``backward`` the backward of a :func:`function_class` class and of its nodes
    (recorded already or later: the node's class is looked up on each call, and
    ``BackwardCFunction.apply`` looks up the class's ``backward`` on each call)."""
    function.backward = staticmethod(backward)
    if "apply" in vars(function._backward_cls):  # the node calls backward itself
        function._backward_cls.apply = backward


enable_single_level_autograd_function: Callable[[], Any] = (
    _autograd_function.enable_single_level_autograd_function  # type: ignore[attr-defined]
)
AutoDispatchBelowAutograd = torch._C._AutoDispatchBelowAutograd
AutoDispatchBelowADInplaceOrView = torch._C._AutoDispatchBelowADInplaceOrView
AFTER_AUTOGRAD_KEYSET = torch._C._after_autograd_keyset
AFTER_AD_INPLACE_OR_VIEW_KEYSET = torch._C._after_ADInplaceOrView_keyset


def apply_function(function: type, *args: Any) -> Any:
    return cast(Any, function).apply(*args)


def below_autograd(
    kernel: Callable[..., Any],
    first_call: Callable[..., Any],
    requires_grad: Callable[[Any], bool],
    *,
    lists: bool,
    keywords: bool,
) -> Callable[..., Any]:
    """A kernel of an op declared non-differentiable, run with autograd off.

    The op's ``Autograd`` key is a fallthrough (no Python crossing), which leaves autograd on
    inside the kernels below it: without this guard a Python fallback made of differentiable
    torch calls would record a graph, and its derivative would leak through ``.backward()``
    (or, for dual tensors, its forward-mode tangent would leak into the output). The guard
    (``_AutoDispatchBelowAutograd``, ~0.4 us) is entered only where autograd could act: an
    input requires grad with grad mode on, or a dual level is open (``_current_level >= 0``,
    read here without a function call); random ops, the usual non-differentiable ones, take
    no such inputs. The registered function is this one (no wrapper object between the
    dispatcher and the kernel): it calls ``first_call`` (``kernel`` with its first call
    checked, see ``_aliasing``) until a call returns, then ``kernel`` itself.

    ``requires_grad(value)``: whether an argument (a tensor or a list of them) requires grad.
    ``lists``: the schema has a list of tensors (``Tensor[]``, ``Tensor?[]``), where
    ``torch._C._any_requires_grad`` skips a list holding a None (or a tuple), so each argument
    is checked with ``requires_grad``; otherwise that one C call checks them all.
    ``keywords``: the schema has keyword-only arguments (the dispatcher passes those, and only
    those, as keywords), so the kernel takes ``**kwargs``.
    """
    below = torch._C._AutoDispatchBelowAutograd
    grad_enabled = torch.is_grad_enabled
    any_requires_grad = torch._C._any_requires_grad
    tensor = torch.Tensor
    dual = _forward_ad
    run: Callable[..., Any]

    def first(*args: Any, **kwargs: Any) -> Any:
        nonlocal run
        out = first_call(*args, **kwargs)
        run = kernel  # the check passed: from now on the kernel itself
        return out

    run = first

    def guarded_keywords(*args: Any, **kwargs: Any) -> Any:
        if (any_requires_grad(*args, **kwargs) and grad_enabled()) or dual._current_level >= 0:
            with below():
                return run(*args, **kwargs)
        return run(*args, **kwargs)

    def guarded(*args: Any) -> Any:
        if (any_requires_grad(*args) and grad_enabled()) or dual._current_level >= 0:
            with below():
                return run(*args)
        return run(*args)

    def guarded_lists(*args: Any, **kwargs: Any) -> Any:
        if dual._current_level < 0 and grad_enabled():
            for a in args:
                if isinstance(a, tensor):
                    if a.requires_grad:
                        break
                elif isinstance(a, (list, tuple)) and requires_grad(a):
                    break
            else:
                if not (kwargs and any(map(requires_grad, kwargs.values()))):
                    return run(*args, **kwargs)
        elif dual._current_level < 0:
            return run(*args, **kwargs)
        with below():
            return run(*args, **kwargs)

    if lists:
        return guarded_lists
    return guarded_keywords if keywords else guarded


# -- Forward-mode AD ----------------------------------------------------------------------------
# Why: a Function's ``jvp`` gets zeros for inputs without a tangent and runs with forward AD
# off, which under ``torch.func`` also turns off every outer ``jvp``/``jacfwd`` level; opreg
# reads the dual level and functorch's interpreter stack to pass None instead of made-up zeros
# and to let outer levels differentiate the rule (``jacfwd(jacfwd(op))``). The rule runs inside
# the jvp level's dispatch, where functorch cannot start a transform: opreg runs it one level
# down (popping the level, as functorch does); with dual tensors a ``torch.func.jvp`` in the
# rule shares the open dual level through ``torch.func``'s own nesting count (``JVP_NESTING``).
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: a ``torch.autograd.Function`` jvp contract that composes with nested
# ``torch.func`` forward-mode levels (and with ``torch.func`` transforms inside the rule).

_unpack_dual: Callable[[torch.Tensor], Any] = _forward_ad.unpack_dual


def tangent_flags(values: Any) -> list[bool] | None:
    """Which of ``values`` carry a tangent at the current dual level (None outside one).

    Autograd hands a Function's ``jvp`` a zero tangent for an input without one; these flags
    let opreg pass None instead, as its contract says."""
    if _forward_ad._current_level < 0:
        return None
    with _forward_ad._set_fwd_grad_enabled(True):  # autograd turned it off around setup
        return [isinstance(v, torch.Tensor) and _unpack_dual(v).tangent is not None for v in values]


def forward_mode_ad_active(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether forward-mode AD would pass through this call: a ``torch.func.jvp``/``jacfwd``
    level on top of functorch's stack, or a dual tensor among the arguments."""
    if torch._C._are_functorch_transforms_active():
        top = _functorch.peek_interpreter_stack()
        if top is not None and top.key() == _functorch.TransformType.Jvp:
            return True
    if _forward_ad._current_level < 0:
        return False
    for value in (*args, *kwargs.values()):
        for t in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(t, torch.Tensor) and _unpack_dual(t).tangent is not None:
                return True
    return False


def transform_grad_modes() -> tuple[bool, bool] | None:
    """Grad mode and forward-grad mode while ``torch.func`` transforms are active, else None."""
    if not torch._C._are_functorch_transforms_active():
        return None
    return torch.is_grad_enabled(), torch._C._is_fwd_grad_enabled()


@contextlib.contextmanager
def grad_modes(modes: tuple[bool, bool]) -> Iterator[None]:
    """Set grad mode and forward-grad mode (as :func:`transform_grad_modes` returned them)."""
    with torch.set_grad_enabled(modes[0]), _forward_ad._set_fwd_grad_enabled(modes[1]):
        yield


def _jvp_interpreter() -> Any:
    """The functorch jvp transform being processed (top of the stack), or None."""
    if not torch._C._are_functorch_transforms_active():
        return None
    top = _functorch.peek_interpreter_stack()
    if top is None or top.key() != _functorch.TransformType.Jvp:
        return None
    return top


class _CtxBelowLevel:
    """A jvp rule's view of autograd's ``ctx`` while the rule runs below its jvp level: the
    tensors it reads from ``ctx`` (``saved_tensors``, attributes set by ``setup_context``) are
    unwrapped from the level, as the tangents are; everything else passes through."""

    __slots__ = ("_ctx", "_level")

    def __init__(self, ctx: Any, level: int) -> None:
        object.__setattr__(self, "_ctx", ctx)
        object.__setattr__(self, "_level", level)

    def __getattr__(self, name: str) -> Any:
        level = self._level
        return tree_map_only(
            torch.Tensor,
            lambda t: _functorch._unwrap_for_grad(t, level),
            getattr(self._ctx, name),
        )

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._ctx, name, value)


@contextlib.contextmanager
def _dual_level_shared() -> Iterator[None]:
    """Let a ``torch.func.jvp`` started here use the dual level that is open, as a nested
    ``torch.func.jvp`` does: it would otherwise open its own, which PyTorch refuses inside
    another ("Nested forward mode AD is not supported"). Its functorch level keeps its
    tangents apart from the open level's, and it runs below with forward AD as found (off,
    in a jvp rule), so the open level's tangents do not enter the rule's computation."""
    _eager_transforms.JVP_NESTING += 1
    try:
        yield
    finally:
        _eager_transforms.JVP_NESTING -= 1


def call_jvp_rule(rule: Callable[..., Any], ctx: Any, *tangents: Any) -> Any:
    """``rule(ctx, *tangents)`` (a Function's jvp) where PyTorch lets it use ``torch.func``.

    Autograd calls a Function's ``jvp`` with forward AD off, inside the dispatch of the
    functorch jvp level being processed (``torch.func.jvp``/``jacfwd``): there functorch
    cannot start a new transform (``torch.func.jvp``/``vjp``/``vmap`` in the rule trip an
    internal assert), and the outer forward-mode levels must still differentiate the rule
    (``jacfwd(jacfwd(op))`` would silently lose its term). So the rule runs one level down,
    as functorch runs any operation it sends to the next level: the tensors of ``tangents``
    and those the rule reads from ``ctx`` are unwrapped from the level, the level is popped
    (with the fresh dispatch state functorch gives the next level, and forward AD as the
    level found it, for outer levels), and the tensors the rule returns are wrapped back into
    the level (as this level's tangents they carry no tangent of it). Outside such a level,
    with dual tensors (``torch.autograd.forward_ad``), a ``torch.func.jvp`` in the rule
    shares the open dual level (see :func:`_dual_level_shared`).
    """
    top = _jvp_interpreter()
    if top is None:
        if _forward_ad._current_level < 0:
            return rule(ctx, *tangents)
        with _dual_level_shared():
            return rule(ctx, *tangents)
    level = top.level()
    enabled = _functorch.CJvpInterpreterPtr(top).prevFwdGradMode()
    args = tree_map_only(torch.Tensor, lambda t: _functorch._unwrap_for_grad(t, level), tangents)
    view = _CtxBelowLevel(ctx, level)
    saved = _functorch.pop_dynamic_layer_stack()
    try:
        with (
            torch._C._ForceDispatchKeyGuard(*_dispatch_state_below()),
            _forward_ad._set_fwd_grad_enabled(enabled),
        ):
            out = rule(view, *args)
    finally:
        _functorch.push_dynamic_layer_stack(saved)
    return tree_map_only(torch.Tensor, lambda t: _functorch._wrap_for_grad(t, level), out)


def _keys(*names: str) -> Any:
    result = torch._C.DispatchKeySet(torch._C.DispatchKey.Undefined)
    for name in names:
        result = result | torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, name))
    return result


_AUTOCAST_KEYS = _keys(*(k for k in torch._C.DispatchKey.__members__ if k.startswith("Autocast")))
_FRONT_BACK = _keys("FuncTorchDynamicLayerFrontMode", "FuncTorchDynamicLayerBackMode")
_DEFAULT_INCLUDED = _keys("BackendSelect", "ADInplaceOrView")


def _dispatch_state_below() -> tuple[Any, Any]:
    """The dispatch keys (included, excluded) that functorch gives an operation it sends from
    a jvp level to the next: its fresh state (transform and autograd keys no longer
    excluded), keeping the caller's autocast state; the dynamic-layer keys only while
    a level is left on the stack."""
    include = torch._C._dispatch_tls_local_include_set() | _DEFAULT_INCLUDED
    if _functorch.peek_interpreter_stack() is None:
        include = include - _FRONT_BACK
    else:
        include = include | _FRONT_BACK
    return include, torch._C._dispatch_tls_local_exclude_set() & _AUTOCAST_KEYS


# -- Aliasing outputs ---------------------------------------------------------------------------
# Why: an output that shares storage with an input (or another output) is caught at a kernel's
# first call (``_aliasing``); storage identity is what ``torch.library.custom_op`` compares
# (``torch._library.utils.check_aliasing_constraint``), the storage object's ``_cdata``: a new
# Python storage object is made per ``untyped_storage()`` call, and ``data_ptr`` cannot tell
# two empty storages apart.
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: a public storage identity (or ``torch.library``'s aliasing check).


def storage_id(t: torch.Tensor) -> int | None:
    """An id of the storage ``t`` views (the same for every view of it), or None for a tensor
    without storage (a wrapper subclass)."""
    try:
        return int(t.untyped_storage()._cdata)
    except (RuntimeError, NotImplementedError, TypeError):
        return None


# -- DTensor sharding -----------------------------------------------------------------------------
# Why: a re-registered op name gets new operators; DTensor's sharding propagator keeps the
# strategies and cached decisions of the destroyed ones, which must not answer for the new.
# Its caches: the propagator's Python LRU cache (``propagate_op_sharding``) and the C++ fast
# path's cache (``torch._C._clear_DTensor_sharding_propagator_cache``), both cleared by the
# debugging helper ``debug._clear_sharding_prop_cache``; a torch without that helper (2.9)
# has them cleared one by one. Checked on torch 2.11, 2.13, 2.14, 2.15
# (``tests/core/test_internals_contract.py``: a cached decision is gone after the clear, through
# the helper and through the fallback).
# Public replacement: an unregister counterpart of
# ``torch.distributed.tensor.experimental.register_sharding`` that clears its caches.


def forget_sharding_strategies(dtensor: Any, overloads: Iterable[OpOverload[Any, Any]]) -> None:
    """Drop the sharding strategies DTensor's propagator holds for ``overloads``."""
    propagator = getattr(getattr(dtensor, "_op_dispatcher", None), "sharding_propagator", None)
    for overload in overloads:
        for table in ("op_strategy_funcs", "op_to_schema_info"):
            getattr(propagator, table, {}).pop(overload, None)


def clear_sharding_caches() -> None:
    """DTensor caches sharding decisions per operator and inputs; a new rule must not meet an
    old decision. Through DTensor's debugging helper where torch has it, else each cache (the
    propagator's Python LRU cache, the C++ fast path's) directly; a torch whose caches are
    neither gets a warning, not a silent stale cache."""
    try:
        from torch.distributed.tensor import DTensor, debug
    except ImportError:  # no torch.distributed: no sharding cache either
        return
    helper = getattr(debug, "_clear_sharding_prop_cache", None)
    if helper is not None:
        helper()
        return
    try:
        propagator: Any = DTensor._op_dispatcher.sharding_propagator
        propagator.propagate_op_sharding.cache_clear()
        fast_path = getattr(torch._C, "_clear_DTensor_sharding_propagator_cache", None)
        if fast_path is not None:
            fast_path()
    except (AttributeError, RuntimeError) as exc:
        warnings.warn(
            f"opreg: DTensor's sharding cache could not be cleared on torch {torch.__version__} "
            f"({type(exc).__name__}: {exc}): a re-registered op may meet the sharding decisions "
            "cached for the op it replaced",
            RuntimeWarning,
            stacklevel=2,
        )


# -- Fake tensors -------------------------------------------------------------------------------
# Why: the first eager call of each kernel runs the op's fake on meta copies of its inputs and
# compares the outputs' shapes and dtypes (``_fake_check``). Where they differ, the fake is run
# again under a ``FakeTensorMode``, as torch.compile runs it, before the op is blamed: for some
# ops the meta device and fake tensors disagree (``native_batch_norm``'s saved statistics in
# eval mode). Only then: building the mode imports torch's compiler stack (and Triton).
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: a public ``FakeTensorMode`` (``torch.library.opcheck`` builds its own).


def fake_run(fake: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``fake`` on fake copies of the tensors of ``args`` and ``kwargs`` (detached; lists
    too), under a fresh ``FakeTensorMode``."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()

    def copy(t: torch.Tensor) -> torch.Tensor:
        return mode.from_tensor(t.detach())

    fake_args = tree_map_only(torch.Tensor, copy, args)
    fake_kwargs = tree_map_only(torch.Tensor, copy, kwargs)
    with mode:
        return fake(*fake_args, **fake_kwargs)
