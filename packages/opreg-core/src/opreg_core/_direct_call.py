"""The op's call from Python: the dispatcher's own route, taken directly when nothing could
route the call differently.

Through the dispatcher, a differentiable op's call crosses into Python twice (the op's
``Autograd`` kernel, then the device kernel below it; a non-differentiable op's once), and the
dispatcher boxes and unboxes every argument on the way: a recorded call cost about twice a
hand-written ``torch.autograd.Function``. For a call in which only plain dense CPU or CUDA
tensors take part, with arguments of exactly their declared types, outside every mode,
transform, tracer, profiler and dual level, the dispatcher's route is known: the op's
Function (when grad mode is on and an input requires grad), whose forward runs the device
type's kernel, or else that kernel alone. :func:`direct_call` takes that route itself, in one
Python frame, with the same Function and the same kernels (the first-call aliasing check
included). Every other call goes through the dispatcher as before: ``torch.compile`` and
``torch.export`` (which see the operator, never this frame), FakeTensor and every other
``TorchDispatchMode`` or ``TorchFunctionMode``, ``torch.func`` transforms, forward-mode AD,
``torch.jit.trace``, the profiler (which records the operator), an autocast region for an op
with an autocast rule (its cast is a dispatcher kernel), tensor subclasses (DTensor,
functional and batched tensors), meta and nested tensors, tensors of mixed device types,
and, of a device type with a kernel of its own, conjugate or negative views, sparse and
inference tensors (see :func:`direct_call`), a positional argument given by name or a
keyword-only one left to its default (the dispatcher fills it in), a scalar of another type
than declared (the dispatcher converts it), and autograd turned off below the op by an outer
kernel. Keyword-only arguments given by name take the direct route: the kernel gets them by
name, as the dispatcher passes them, and the op's Function all arguments in declaration
order.

A mutating op's call takes the direct route where autograd records nothing (grad mode off
or no input requiring grad): it bumps the versions of the written tensors, as its
``ADInplaceOrView`` kernel does (a Liger-style backward writes its gradients in place through
such an op on every step). An op whose one kernel serves every device type then runs it. An
op with device kernels enters the dispatcher below its ``ADInplaceOrView`` key instead
(``write_below``): one crossing into Python, the device kernel, with the dispatcher choosing
it from the tensors' keys in C++. Reading those keys here cost more, most of all in a
backward on autograd's CUDA thread (SwiGLU's training step on the H200: 1.20x the
hand-written Function with the key reads, 1.10x through a one-crossing dispatcher route,
``benchmarks/gpu/probe_swiglu_routes.py``). A call that autograd would record goes through
the dispatcher from the top, as do calls below a version bump, with a subclass, and (with
one kernel for every device type) on inference tensors.

List arguments (``Tensor[]``, ``Tensor?[]``) take the direct route too, each element checked
as a tensor argument is (a list given as a tuple, which the dispatcher converts, goes to it).
An op whose signature the plan does not cover (a mutated ``Tensor?`` or list, list outputs,
other argument types) keeps the dispatcher's C++ entry point as its call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from ._autograd import DirectRecord
from ._kernels import DeviceKernels
from ._private import AutoDispatchBelowADInplaceOrView as below_inplace_or_view
from ._private import (
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
from ._signature import (
    OPTIONAL_TENSOR,
    OPTIONAL_TENSOR_LIST,
    TENSOR,
    TENSOR_LIST,
    Signature,
)

#: Argument kinds the plan covers: a schema type -> the Python type the value must have
#: exactly (what the dispatcher would hand the kernel unchanged); tensors are checked apart.
_SCALAR_KINDS: dict[str, type] = {"float": float, "int": int, "bool": bool, "str": str}

#: How many lengths of its list arguments an op keeps the positions of (``spread``); calls
#: with others work them out again.
_SPREAD_LENGTHS = 64

#: Dispatch key sets of plain dense tensors (their ``raw_repr``) -> device type, and of every
#: other tensor seen -> "" (not plain): learnt from a fresh tensor of the same device.
_PLAIN_KEYS: dict[int, str] = {}


def _plain_device_type(tensor: torch.Tensor, raw: int) -> str:
    """The device type of a plain dense tensor whose key set is ``raw`` ("" if not plain)."""
    device = tensor.device
    found = ""
    if device.type in DeviceKernels.DEVICE_TYPES:
        with torch.inference_mode(False):  # a normal tensor's keys, even in inference mode
            fresh = torch.empty(0, device=device)
        if dispatch_keys_raw(fresh) == raw:
            found = device.type
    _PLAIN_KEYS[raw] = found
    return found


class ArgumentPlan(NamedTuple):
    """Where each kind of argument sits in a call, read once from the op's signature."""

    tensors: tuple[int, ...]  #: positions of the ``Tensor`` arguments
    optional: tuple[int, ...]  #: positions of the ``Tensor?`` arguments
    scalars: tuple[tuple[int, type], ...]  #: (position, the exact Python type) of the scalars
    mutated: tuple[int, ...]  #: positions of the mutated (``Tensor(a!)``) arguments
    #: (position, its elements may be None) of the ``Tensor[]`` and ``Tensor?[]`` arguments
    lists: tuple[tuple[int, bool], ...] = ()


def argument_plan(signature: Signature) -> ArgumentPlan | None:
    """The plan of an op's arguments in declaration order (the positional ones, then the
    keyword-only ones), or None where the direct route does not apply to the op."""
    if signature.returns_list or len(signature.types) != len(signature.names):
        return None
    tensors, optional, scalars, lists = [], [], [], []
    for i, kind in enumerate(signature.types):
        if kind == TENSOR:
            tensors.append(i)
        elif kind == OPTIONAL_TENSOR:
            optional.append(i)
        elif kind in _SCALAR_KINDS:
            scalars.append((i, _SCALAR_KINDS[kind]))
        elif kind in (TENSOR_LIST, OPTIONAL_TENSOR_LIST):
            lists.append((i, kind == OPTIONAL_TENSOR_LIST))
        else:
            return None
    if not tensors and not lists:
        return None  # no tensor to say which device kernel serves the call
    mutated = tuple(signature.names.index(name) for name in signature.mutated)
    if any(i not in tensors for i in mutated):
        return None  # a mutated Tensor? or list of tensors: the dispatcher's
    return ArgumentPlan(tuple(tensors), tuple(optional), tuple(scalars), mutated, tuple(lists))


def direct_call(
    entry: Callable[..., Any],
    signature: Signature,
    kernels: DeviceKernels,
    record: DirectRecord | None,
    *,
    autocast: bool = False,
) -> Callable[..., Any] | None:
    """The op's ``__call__`` (see the module docstring), or None where the plan does not
    cover its signature.

    ``entry``: the dispatcher's C++ entry point of the op. ``kernels``: the kernel the
    dispatcher runs for a plain tensor of each device type (kept up to date by the op).
    ``record``: the op's Functions for the direct call (None for an op declared
    non-differentiable, whose kernel runs itself below autograd). ``autocast``: the op has an
    autocast rule, so its calls go to the dispatcher (which casts) while any autocast region
    is active; an op without one is unaffected by autocast, as the dispatcher would leave it.

    A tensor served by the fallback registered on ``CompositeExplicitAutograd`` (every device
    type, or every one but those with a ``register_kernel`` kernel of their own, such as CUDA
    for a Triton op) needs only be a plain ``torch.Tensor`` (or ``Parameter``) that is neither
    meta (where the fake serves) nor nested (whose keys have no kernel): the dispatcher would
    run that fallback for any other tensor of that type, whatever its device, layout or view
    bits. A tensor of a device type with its own kernel (a Triton kernel, a ``register_kernel``
    kernel) must have a plain dense tensor's dispatch key set, all such tensors of one device
    type and none served by the fallback. Where the op has such kernels, a non-differentiable
    op's call and any call in inference mode go to the dispatcher at once: it reaches the
    kernel in one crossing there (the op's ``Autograd`` key falls through, inference tensors
    have none), which costs about what those checks cost. A differentiable op's call costs
    the dispatcher two crossings (its ``Autograd`` kernel, then the device kernel), recorded
    or not.
    """
    plan = argument_plan(signature)
    if plan is None:
        return None
    tensors, optionals, scalars, mutated, lists = plan
    #: (position, may be None) of every tensor argument, the required ones first
    positions = (*((i, False) for i in tensors), *((i, True) for i in optionals))
    # With no ``Tensor`` argument, a call may hold no tensor at all (empty lists, Nones): the
    # dispatcher's then, which has no tensor to pick a kernel by either.
    may_hold_none = not tensors
    count = len(signature.types)
    npos = len(signature.positional)
    keywords = signature.kwarg_only  # passed by name: the kernel gets them as keywords
    multiple = signature.num_returns > 1
    tensor_type, parameter_type = torch.Tensor, torch.nn.Parameter
    plain_keys = _PLAIN_KEYS
    serving = kernels.serving
    grad_enabled = torch.is_grad_enabled
    inference_mode = torch.is_inference_mode_enabled
    applies = record.applies if record is not None else {}

    # The same entry point, entered below the op's ADInplaceOrView kernel: a name of its own,
    # so that the tests' spy on ``entry`` (tests/conftest.py) counts entries from the top only.
    below = entry

    list_positions = signature.list_positions  # (those of ``lists``)
    #: the lists' lengths -> ``spread``'s positions for them (at most ``_SPREAD_LENGTHS``)
    spread_positions: dict[tuple[int, ...], tuple[tuple[int, bool], ...]] = {}

    def spread(full: tuple[Any, ...]) -> tuple[list[Any], tuple[tuple[int, bool], ...]] | None:
        """Every argument, then the elements of each list argument (as the op's Function
        takes them, ``DirectRecord``); and the positions there of every tensor argument and
        list element, with whether it may be None. None where a list argument is not a
        ``list`` (the dispatcher converts a tuple)."""
        values, counted = [*full], []
        for i in list_positions:
            elements = full[i]
            if type(elements) is not list:
                return None
            values += elements
            counted.append(len(elements))
        lengths = tuple(counted)
        where = spread_positions.get(lengths)
        if where is None:
            spread_list = [*positions]
            start = count
            for (_, optional), n in zip(lists, lengths, strict=True):
                spread_list += [(j, optional) for j in range(start, start + n)]
                start += n
            where = tuple(spread_list)
            if len(spread_positions) < _SPREAD_LENGTHS:
                spread_positions[lengths] = where
        return values, where

    def own_lists(
        args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``args`` and ``kwargs`` with a new list for each list argument: the dispatcher
        hands a kernel lists of its own, which it may change without its caller seeing it."""
        own, own_kwargs = [*args], {**kwargs}
        for i in list_positions:
            if i < npos:
                own[i] = [*own[i]]
            else:
                name = keywords[i - npos]
                own_kwargs[name] = [*own_kwargs[name]]
        return tuple(own), own_kwargs

    def write_below(
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        values: tuple[Any, ...] | list[Any],
        checked: tuple[tuple[int, bool], ...],
    ) -> Any:
        """A mutating op with device kernels, outside every mode, transform and tracer: what
        its ``ADInplaceOrView`` kernel does (bump the written tensors, then the rest of the
        dispatch below that key), with the dispatcher entered below it, so that the call
        crosses into Python once (the device kernel) instead of twice. The dispatcher then
        picks the kernel from the tensors' keys itself: no key set is read here, only that
        each tensor is a plain ``torch.Tensor`` (a subclass's call is the dispatcher's from
        the top) and that autograd would record nothing."""
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

    def call(self: Any, /, *args: Any, **kwargs: Any) -> Any:
        # ``full``: every argument in declaration order (the positional ones, then the
        # keyword-only ones, each given by name; an omitted default goes to the dispatcher,
        # which fills it in).
        full = args
        if kwargs or len(args) != count:
            if not keywords or len(args) != npos or len(kwargs) != len(keywords):
                return entry(*args, **kwargs)
            try:
                full = (*args, *[kwargs[name] for name in keywords])
            except KeyError:  # a name that is not the op's: the dispatcher's error
                return entry(*args, **kwargs)
        chosen = kernels.everywhere  # the kernel that serves the call (see ``Registered``)
        if chosen is None and ((record is None and not mutated) or inference_mode()):
            # Device kernels, and the dispatcher reaches the kernel in one crossing: a
            # non-differentiable op's Autograd key falls through, and inference tensors have
            # none. Checking each tensor's key set would cost about as much (H200 host: the
            # plain op 1.17x its launcher through the dispatcher, 1.51x with the checks first).
            return entry(*args, **kwargs)
        if (
            compiling()
            or function_modes_active()
            or dispatch_modes_active()
            or functorch_transforms_active()
            or forward_ad_level() >= 0
            or profiler_enabled()
            or jit_tracing()
            or (autocast and any_autocast_enabled())
        ):
            return entry(*args, **kwargs)
        # ``values``: the arguments and, with list arguments, their elements after them;
        # ``checked``: where in it each tensor sits (with whether it may be None).
        values: tuple[Any, ...] | list[Any] = full
        checked: tuple[tuple[int, bool], ...] = positions
        if lists:
            spread_out = spread(full)
            if spread_out is None:
                return entry(*args, **kwargs)
            values, checked = spread_out
        if chosen is None and mutated:
            return write_below(args, kwargs, values, checked)
        if chosen is None:  # (read only here: the loop reads them only then)
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
                    found = _plain_device_type(a, raw)
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
        recorded = needs_grad and grad_enabled()
        if mutated:
            if recorded or inplace_or_view_excluded():
                # autograd's rules for writes to recorded tensors; or below a version bump
                return entry(*args, **kwargs)
            # (One kernel for every device type: ``write_below`` serves the others.)
            written = [full[i] for i in mutated]
            for t in written:
                if t.is_inference():  # has no version counter (the dispatcher bumps none)
                    return entry(*args, **kwargs)
            # What the op's ADInplaceOrView kernel does (``_mutation``): bump, then run the
            # kernel below that key (its own in-place aten calls bump nothing more).
            bump_versions(written)
            if lists:
                args, kwargs = own_lists(args, kwargs)
            with below_inplace_or_view():
                out = chosen.direct(*args, **kwargs)
        elif recorded and record is not None:
            if autograd_excluded():  # below an outer kernel: the dispatcher records nothing
                return entry(*args, **kwargs)
            apply = applies.get(chosen.kernel)
            if apply is None:
                apply = record.function_for(chosen.kernel)
            # (A Function takes positional arguments only; with list arguments, their
            # elements follow the declared arguments, so that autograd sees them.)
            out = apply(*values)
        else:
            # What the dispatcher runs below the op's Autograd kernel: the kernel, which for a
            # non-differentiable op runs itself below autograd where autograd could act.
            kernel = chosen.kernel if recorded else chosen.direct
            if lists:
                args, kwargs = own_lists(args, kwargs)
            out = kernel(*args, **kwargs) if kwargs else kernel(*args)
        if multiple and type(out) is list:
            return tuple(out)
        return out

    return call
