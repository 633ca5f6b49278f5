"""The op's call from Python: which route each call takes, and why. One place.

Through the dispatcher, a differentiable op's call crosses into Python twice (its
``Autograd`` kernel, then the device kernel below it) and boxes every argument on the way: a
recorded call cost about twice a hand-written ``torch.autograd.Function``. Where nothing
could route a call differently, the dispatcher's route is known, and the op takes it itself,
in one Python frame, with the same Function and the same kernels (their first-call checks
included). Every other call goes to the dispatcher, so ``torch.compile``, ``torch.export``,
every mode and transform, the profiler and tensor subclasses see the operator.

The routes (the functions of :func:`call_path`), by the first row that matches; ``call``
checks the rows in this order:

====  ==========================================================  =====================
row   the call                                                     route
====  ==========================================================  =====================
0     the op's signature is not covered (:func:`argument_plan`:    the operator's entry
      list outputs, a mutated ``Tensor?`` or list, other types),   point is the op's call
      or an untested torch (``_versions``)                         (no frame at all)
1     a positional argument given by name, a keyword-only one      ``dispatcher``
      left to its default (the dispatcher fills it in)
2     device kernels, and the op is non-differentiable (and        ``dispatcher`` [a]
      writes nothing), or inference mode is on
3     compiling; a ``TorchFunctionMode`` or ``TorchDispatchMode``;  ``dispatcher``
      a dual level; the profiler; ``jit.trace``; an autocast
      region, for an op with an autocast rule (its cast is a
      dispatcher kernel)
4     a ``torch.func`` transform: where every level is a vmap       ``vmap_fold`` [c]
      level batching some argument, the op's ``vmap_fn`` serves
      every device and nothing else is in play (below); any
      other transform or call                                      ``dispatcher``
5     a list argument given as a tuple (the dispatcher converts)    ``dispatcher``
6     a mutating op with device kernels                            ``write_below`` [b]
7     a tensor subclass; meta or nested; for a device type with    ``dispatcher``
      a kernel of its own, a tensor that is not plain dense
      (conjugate, negative, sparse, inference); mixed device
      types; no kernel for the device type; no tensor at all; a
      scalar of another type than declared
8     a mutating op: autograd would record the write, below a      ``dispatcher``
      version bump, or an inference tensor is written
9     a mutating op otherwise                                      ``write_in_place``
10    grad mode on and an input requires grad, below an outer      ``dispatcher``
      autograd kernel (which turned autograd off)
11    grad mode on and an input requires grad                      ``recorded``
12    anything else                                                ``plain``
====  ==========================================================  =====================

What each route runs, and the measurement that justifies it:

- ``dispatcher``: the operator's C++ entry point (``entry``), which runs every kernel.
- ``plain``: the kernel that serves the tensors' device type (a ``register_kernel`` kernel,
  else the fallback), as the dispatcher would run it below the op's ``Autograd`` kernel.
  ``bench_core`` (``docs/performance.md``): a tiny call about a third of the dispatcher's.
- ``recorded``: the op's ``torch.autograd.Function`` around that kernel (``DirectRecord``),
  as the op's ``Autograd`` kernel would apply it. ``bench_training``: a training step at
  the cost of a hand-written Function (it was about twice through the dispatcher).
- ``write_in_place``: what a mutating op's ``ADInplaceOrView`` kernel does (bump the written
  tensors' versions), then its one kernel below that key.
- ``write_below``: [b] a mutating op with device kernels: the version bump, then the
  dispatcher entered below ``ADInplaceOrView``: one crossing into Python, with the
  dispatcher choosing the device kernel from the tensors' keys in C++. Reading those keys
  here cost more, most of all in a backward on autograd's CUDA thread (SwiGLU's training
  step on the H200: 1.20x the hand-written Function with the key reads, 1.10x this way;
  ``benchmarks/probes/probe_swiglu_routes.py``, ``docs/performance.md``).
- ``vmap_fold``: [c] the fold of every vmap level into one call of ``vmap_fn`` on the
  folded batch (``BatchingRules.vmap_fold``, called by ``call`` itself; None where it does
  not apply), which the op's batching kernel does too, but here without the dispatcher's
  trip into that kernel (functorch's dynamic layer, the boxed call into Python) and the
  state it forces below the levels: from the caller's level, popping the levels gives that
  state (the vmap probe checks so once). It applies
  where the fold does (``_batching``): positional arguments only, plain tensors of which
  none needs a gradient, one output, default input wrapping, no ``max_vmap_level``, no
  ``register_kernel`` kernel, no inference mode, nothing written. Otherwise the call goes
  to the dispatcher. ``bench_core`` (2-core VM, torch 2.13): ``vmap(op)`` at batch 64
  1.39x ``vmap`` of the plain function through the batching kernel, 1.23x by this route;
  triple vmap 1.56x -> 1.24x (``docs/performance.md``).
- [a] The dispatcher reaches a non-differentiable op's kernel in one crossing (its
  ``Autograd`` key falls through; inference tensors have none), which costs about what
  checking each tensor's key set would (H200 host: the plain op 1.17x its launcher through
  the dispatcher, 1.51x with the checks first).

A tensor served by the fallback registered on ``CompositeExplicitAutograd`` (every device
type, or every one but those with a kernel of their own, such as CUDA for a Triton op)
needs only be a plain ``torch.Tensor`` (or ``Parameter``) that is neither meta nor nested:
the dispatcher would run that fallback whatever its device, layout or view bits. Keyword-only
arguments given by name take the direct routes: the kernel gets them by name, as the
dispatcher passes them, and the op's Function all arguments in declaration order. List
arguments (``Tensor[]``, ``Tensor?[]``) take them too, each element checked as a tensor
argument is; the Function gets their elements after the declared arguments.

``tests/core/test_routes.py`` prints the route of a list of calls; every route's behaviour is
tested in ``tests/core/test_direct_call.py`` and its neighbours.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .._autograd import DirectRecord
from .._kernels import DeviceKernels
from .._private import AutoDispatchBelowADInplaceOrView as below_inplace_or_view
from .._private import (
    any_autocast_enabled,
    autograd_excluded,
    bump_versions,
    compiling,
    dispatch_keys_raw,
    dispatch_modes_active,
    forward_ad_level,
    function_modes_active,
    functorch_transforms_active,
    inplace_or_view_excluded,
    jit_tracing,
    profiler_enabled,
)
from .._signature import Signature
from .arguments import ArgumentPlan, Positions, argument_plan, list_owner, spreader
from .plain import PLAIN_KEYS, plain_device_type

__all__ = ["ArgumentPlan", "argument_plan", "call_path"]

#: The routes, as :func:`call_path` names them (``tests/core/test_routes.py`` reads it).
ROUTES = ("dispatcher", "vmap_fold", "write_below", "write_in_place", "recorded", "plain")


def call_path(
    entry: Callable[..., Any],
    signature: Signature,
    kernels: DeviceKernels,
    record: DirectRecord | None,
    *,
    autocast: bool = False,
    vmap_fold: Callable[[tuple[Any, ...]], Any] | None = None,
) -> Callable[..., Any] | None:
    """The op's call (see the module docstring), or None where the plan does not cover its
    signature (row 0: the op's call is then ``entry``).

    ``entry``: the dispatcher's C++ entry point of the op. ``kernels``: the kernel the
    dispatcher runs for a plain tensor of each device type (kept up to date by the op).
    ``record``: the op's Functions (None for an op declared non-differentiable, whose kernel
    runs itself below autograd). ``autocast``: the op has an autocast rule. ``vmap_fold``:
    the fold of the vmap levels from the caller (None where it never applies to the op).
    """
    plan = argument_plan(signature)
    if plan is None:
        return None
    tensors, _, scalars, mutated, lists = plan
    positions = plan.positions
    # With no ``Tensor`` argument, a call may hold no tensor at all (empty lists, Nones).
    may_hold_none = not tensors
    count, npos = len(signature.types), len(signature.positional)
    keywords = signature.kwarg_only  # passed by name: the kernel gets them as keywords
    multiple = signature.num_returns > 1
    tensor_type, parameter_type = torch.Tensor, torch.nn.Parameter
    plain_keys, serving = PLAIN_KEYS, kernels.serving
    grad_enabled, inference_mode = torch.is_grad_enabled, torch.is_inference_mode_enabled
    applies = record.applies if record is not None else {}
    spread, own_lists = spreader(plan, signature), list_owner(signature)
    # The same entry point, entered below the op's ADInplaceOrView kernel: a name of its own,
    # so that the tests' spy on ``entry`` (tests/conftest.py) counts entries from the top only.
    below = entry

    # -- The routes -------------------------------------------------------------------------

    def write_below(
        args: tuple[Any, ...], kwargs: dict[str, Any], values: Any, checked: Positions
    ) -> Any:
        """Row 6: bump the written tensors, then the dispatch below ``ADInplaceOrView``
        (only each tensor's type and whether autograd would record are read here)."""
        needs_grad = False
        for i, optional in checked:
            a = values[i]
            if a is None and optional:
                continue
            kind = type(a)
            if kind is not tensor_type and kind is not parameter_type:
                return entry(*args, **kwargs)
            if a.requires_grad:
                needs_grad = True
        if (needs_grad and grad_enabled()) or inplace_or_view_excluded():
            return entry(*args, **kwargs)
        bump_versions([values[i] for i in mutated])  # (an inference tensor is left alone)
        with below_inplace_or_view():
            return below(*args, **kwargs)

    def write_in_place(
        args: tuple[Any, ...], kwargs: dict[str, Any], full: tuple[Any, ...], kernel: Any
    ) -> Any:
        """Rows 8-9: what the op's ``ADInplaceOrView`` kernel does (``_mutation``): bump,
        then run the kernel below that key (its own in-place aten calls bump nothing more)."""
        written = [full[i] for i in mutated]
        for t in written:
            if t.is_inference():  # has no version counter (the dispatcher bumps none)
                return entry(*args, **kwargs)
        bump_versions(written)
        if lists:
            args, kwargs = own_lists(args, kwargs)
        with below_inplace_or_view():
            return kernel(*args, **kwargs)

    def recorded(args: tuple[Any, ...], kwargs: dict[str, Any], values: Any, kernel: Any) -> Any:
        """Rows 10-11: the op's Function around the kernel (positional arguments only; list
        elements after the declared arguments, so that autograd sees them)."""
        if autograd_excluded():  # below an outer kernel: the dispatcher records nothing
            return entry(*args, **kwargs)
        apply = applies.get(kernel)
        if apply is None:
            apply = record.function_for(kernel)  # type: ignore[union-attr]
        return apply(*values)

    # -- The table --------------------------------------------------------------------------

    def call(*args: Any, **kwargs: Any) -> Any:
        # Row 1. ``full``: every argument in declaration order.
        full = args
        if kwargs or len(args) != count:
            if not keywords or len(args) != npos or len(kwargs) != len(keywords):
                return entry(*args, **kwargs)
            try:
                full = (*args, *[kwargs[name] for name in keywords])
            except KeyError:  # a name that is not the op's: the dispatcher's error
                return entry(*args, **kwargs)
        chosen = kernels.everywhere  # one kernel for every device type, if so
        # Row 2.
        if chosen is None and ((record is None and not mutated) or inference_mode()):
            return entry(*args, **kwargs)
        # Row 3.
        if (
            compiling()
            or function_modes_active()
            or dispatch_modes_active()
            or forward_ad_level() >= 0
            or profiler_enabled()
            or jit_tracing()
            or (autocast and any_autocast_enabled())
        ):
            return entry(*args, **kwargs)
        # Row 4 (``vmap_fold`` is the op's ``BatchingRules.vmap_fold``: None where it does
        # not apply).
        if functorch_transforms_active():
            out = vmap_fold(args) if vmap_fold is not None and not kwargs else None
            return entry(*args, **kwargs) if out is None else out
        # Row 5. ``values``: the arguments, then list elements; ``checked``: the tensors there.
        values: Any = full
        checked = positions
        if lists:
            spread_out = spread(full)
            if spread_out is None:
                return entry(*args, **kwargs)
            values, checked = spread_out
        # Row 6.
        if chosen is None and mutated:
            return write_below(args, kwargs, values, checked)
        # Row 7: which kernel serves the tensors (``chosen``), and whether one needs grad.
        if chosen is None:
            shared = kernels.shared
            on_cpu, on_cuda = kernels.on_cpu, kernels.on_cuda
        needs_grad = shared_seen = False
        device = ""
        for i, optional in checked:
            a = values[i]
            if a is None and optional:
                continue
            kind = type(a)
            if kind is not tensor_type and kind is not parameter_type:
                return entry(*args, **kwargs)
            if chosen is None and (
                shared is None or (on_cuda and a.is_cuda) or (on_cpu and a.is_cpu)
            ):
                # a device type with a kernel of its own: only a plain dense tensor's key set
                raw = dispatch_keys_raw(a)
                found = plain_keys.get(raw)
                if found is None:
                    found = plain_device_type(a, raw)
                if not found or (device and found != device):
                    return entry(*args, **kwargs)
                device = found
            elif a.is_meta or a.is_nested:  # the fake's; nested tensors have keys of their own
                return entry(*args, **kwargs)
            else:  # the shared fallback serves it, whatever its device, layout or view bits
                shared_seen = True
            if a.requires_grad:
                needs_grad = True
        if may_hold_none and not (device or shared_seen):  # no tensor at all
            return entry(*args, **kwargs)
        if chosen is None:
            if not device:
                chosen = shared
            elif shared_seen:  # mixed device types
                return entry(*args, **kwargs)
            else:
                chosen = serving.get(device)
            if chosen is None:  # no kernel for the device type
                return entry(*args, **kwargs)
        for i, exact in scalars:
            if type(full[i]) is not exact:
                return entry(*args, **kwargs)
        grad = needs_grad and grad_enabled()
        # Rows 8-9.
        if mutated:
            if grad or inplace_or_view_excluded():
                return entry(*args, **kwargs)
            out = write_in_place(args, kwargs, full, chosen.direct)
        # Rows 10-11.
        elif grad and record is not None:
            out = recorded(args, kwargs, values, chosen.kernel)
        else:  # Row 12 (a non-differentiable op's kernel runs itself below autograd)
            kernel = chosen.kernel if grad else chosen.direct
            if lists:
                args, kwargs = own_lists(args, kwargs)
            out = kernel(*args, **kwargs) if kwargs else kernel(*args)
        if multiple and type(out) is list:
            return tuple(out)
        return out

    return call
