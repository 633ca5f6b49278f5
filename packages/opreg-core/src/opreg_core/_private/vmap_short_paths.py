"""vmap short paths: two or more vmap levels folded into one call of ``vmap_fn``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch._C._functorch as _functorch

from .dispatch_state import (
    AUTOCAST_KEYS,
    DEFAULT_INCLUDED_KEYS,
    ForceDispatchKeyGuard,
    pop_layer,
    push_layer,
    tls_exclude,
    tls_include,
)
from .vmap import add_batch_dim, call_one_level_down, current_vmap_level, unwrap_batched

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

#: Dotted names of the internals used here.
INTERNALS: tuple[str, ...] = (
    "torch._C._functorch.get_dynamic_layer_stack_depth",
    "torch._C._len_torch_dispatch_stack",
    "torch._C._len_torch_function_stack",
    "torch._C._is_tracing",
    "torch._C.DispatchKeySet.raw_repr",
    "torch._C.DispatchKeySet.from_raw_repr",
)

dynamic_layer_depth: Callable[[], int] = _functorch.get_dynamic_layer_stack_depth
dispatch_modes_active: Callable[[], int] = torch._C._len_torch_dispatch_stack
function_modes_active: Callable[[], int] = torch._C._len_torch_function_stack
#: Whether torch.jit is tracing (``torch.jit.is_tracing`` is the public, untyped, slower form).
jit_tracing: Callable[[], bool] = torch._C._is_tracing


class VmapLevelKeys:
    """What entering a vmap level does to the dispatch state, as measured by
    :func:`vmap_level_keys`: the bits it adds to the included and excluded sets (raw
    representations: a key set's ``-`` keeps backend bits, and the state below must be the
    caller's exactly)."""

    def __init__(self, included: int, excluded: int, popped_is_below: bool = False) -> None:
        self.included = included
        self.excluded = excluded
        #: Whether popping the levels at the caller's (outside any level's processing) gives
        #: the dispatch state below them, as measured: the caller's fold needs no guard then.
        self.popped_is_below = popped_is_below
        #: (include, exclude) at a level -> the state below it, for the last state seen.
        self._last: tuple[int, int, tuple[Any, Any]] | None = None

    def state_below(self) -> tuple[Any, Any] | None:
        """The dispatch state (included, excluded) that functorch gives an operation sent
        below the vmap levels, from the current one (inside a level being processed): the
        current one without what the levels added, which is the caller's own state unless the
        caller had itself excluded some of those keys (inference mode or a dispatch mode, which
        the short path checks first). None when the current state lacks something a level adds
        (not inside a vmap level as measured: the dispatcher must decide)."""
        include = tls_include().raw_repr()
        exclude = tls_exclude().raw_repr()
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
    """Run the probe operator under ``torch.vmap`` from a fresh state and read what it saw:
    the dispatch state at the level, one level down (through the dispatcher), and where the
    caller popped the level itself."""
    seen: dict[str, tuple[Any, Any]] = {}
    lib = torch.library.Library(_PROBE_NAMESPACE, "FRAGMENT")  # type: ignore[no-untyped-call]
    try:
        caller = _define_probe(lib, seen)
        # A fresh state: nothing excluded but autocast (as functorch leaves it).
        with ForceDispatchKeyGuard(
            tls_include() | DEFAULT_INCLUDED_KEYS, tls_exclude() & AUTOCAST_KEYS
        ):
            torch.vmap(caller)(torch.zeros(2))
    finally:
        lib._destroy()  # type: ignore[no-untyped-call]
    return _level_keys_seen(seen)


def _define_probe(lib: Any, seen: dict[str, tuple[Any, Any]]) -> Callable[..., Any]:
    """The probe operator in ``lib``: its batching rule records the state at the level and
    sends the call one level down, where its kernel records the state below. Returns the
    function to vmap, which records the state with the level popped, then calls it."""
    lib.define("probe(Tensor x) -> Tensor")
    op = getattr(torch.ops, _PROBE_NAMESPACE).probe.default

    def below(x: torch.Tensor) -> torch.Tensor:
        seen["below"] = _state()
        return x.clone()

    def rule(x: torch.Tensor) -> torch.Tensor:
        seen["level"] = _state()
        level = current_vmap_level()
        inner, dim = unwrap_batched(x, level)
        assert dim is not None  # the probe batches its only argument
        return add_batch_dim(call_one_level_down(op, (inner,), {}), dim, level)

    def caller(x: torch.Tensor) -> torch.Tensor:
        seen["popped"] = call_below_vmap_levels(1, None, _state)
        return op(x)  # type: ignore[no-any-return]

    lib.impl("probe", below, "CompositeExplicitAutograd")
    lib.impl("probe", rule, "FuncTorchBatched")
    return caller


def _level_keys_seen(seen: dict[str, tuple[Any, Any]]) -> VmapLevelKeys | None:
    """The :class:`VmapLevelKeys` of what the probe saw; None where a level removed a key."""
    at_include, at_exclude = (keys.raw_repr() for keys in seen["level"])
    below_include, below_exclude = (keys.raw_repr() for keys in seen["below"])
    if below_include & ~at_include or below_exclude & ~at_exclude:
        return None  # the level removed a key: not the add-only change assumed here
    popped = tuple(keys.raw_repr() for keys in seen["popped"])
    return VmapLevelKeys(
        at_include & ~below_include,
        at_exclude & ~below_exclude,
        popped == (below_include, below_exclude),
    )


def _state() -> tuple[Any, Any]:
    """The thread's dispatch state: (included, excluded) key sets."""
    return tls_include(), tls_exclude()


def call_below_vmap_levels(
    count: int, below: tuple[Any, Any] | None, fn: Callable[..., Any], *args: Any
) -> Any:
    """``fn(*args)`` with the top ``count`` functorch levels (vmap levels) popped, in the
    dispatch state functorch gives an operation it sends below them, without a trip through
    the dispatcher. Inside the top level's batching kernel that state is ``below`` (from
    :meth:`VmapLevelKeys.state_below`), forced for the call: what
    :func:`call_one_level_down` gives an operator after its last level. From the caller's
    level (``below`` None: no level is being processed), popping the levels is all it takes
    (functorch restores the caller's state, and popping the last level drops its
    dynamic-layer keys; ``VmapLevelKeys.popped_is_below`` says whether the probe saw so)."""
    saved = [pop_layer() for _ in range(count)]
    try:
        if below is None:
            return fn(*args)
        with ForceDispatchKeyGuard(*below):
            return fn(*args)
    finally:
        for layer in reversed(saved):
            push_layer(layer)
