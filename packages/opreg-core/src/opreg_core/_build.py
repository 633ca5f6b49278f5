"""Building a registered op from its :class:`OpSpec`, one concern per function: the definition
(fallback and fake), batching, mutation, autograd, and the op object."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ._autocast import make_autocast_kernel
from ._autograd import (
    DirectRecord,
    derive_batched_backward,
    derive_batched_jvp,
    make_autograd_kernel,
    non_differentiable_backward,
)
from ._batching import BatchingRules, VmapStats
from ._call_path import call_path
from ._kernels import DeviceKernels, Registered, as_registered, checked_arity
from ._mutation import make_mutation_kernel
from ._naming import BATCHED_SUFFIX, NOGRAD_SUFFIX
from ._op import VmapOp
from ._options import OpSpec
from ._private import OpOverload, entry_point, vmap_level_keys
from ._registrar import Registrar
from ._state import OpState
from ._versions import speed_paths_allowed

Overload = OpOverload[..., Any]


def build(spec: OpSpec, reg: Registrar) -> VmapOp[Any, Any]:
    """Register every kernel of ``spec`` through ``reg`` and return the op object.

    On a torch release outside the tested range (``_versions``) the op takes none of the
    speed paths built on torch internals: its call is the operator's entry point (no direct
    call), its vmap rule always dispatches (no fold, no twin, no one-level pass) and its
    Function's graph node runs autograd's own ``apply``."""
    fast = speed_paths_allowed()
    main, fallbacks = define(spec, reg)
    batched, rules = add_batching(spec, reg, main, fast=fast)
    targets = [(spec.opname, main)]
    if batched is not None:
        targets.append((spec.opname + BATCHED_SUFFIX, batched))
    if spec.signature.mutated:
        add_mutation_kernels(spec, reg, targets)
    record = add_autograd_kernels(spec, reg, targets, fast=fast)
    operators = [(name, entry_point(overload)) for name, overload in targets]
    if rules is not None and rules.nograd_op is not None:
        operators.append((spec.opname + NOGRAD_SUFFIX, rules.nograd_op))
    add_autocast_kernels(spec, reg, operators)
    everywhere = fallbacks.get("cpu") if spec.options["device_types"] is None else None
    kernels = DeviceKernels(fallbacks, everywhere)
    call = (
        call_path(
            entry_point(main),
            spec.signature,
            kernels,
            record,
            autocast=spec.autocast_rule is not None,
            vmap_fold=rules.vmap_fold if rules is not None and rules.caller_fold else None,
        )
        if fast
        else None
    )
    return make_op(spec, reg, main, batched, rules, kernels, call, record)


def define(spec: OpSpec, reg: Registrar) -> tuple[Overload, dict[str, Registered]]:
    """The operator's definition, its fallback on each dispatch key, and its fake; and the
    fallback serving each device type the direct call serves (see ``DeviceKernels``)."""
    n, qualname, schema = spec.num_returns, spec.qualname, spec.signature.schema
    fake, differentiable = spec.options["fake_fn"], spec.options["differentiable"]
    assert fake is not None  # resolve() requires it
    main = reg.define(spec.opname, schema)
    fallbacks: dict[str, Registered] = {}
    for key in spec.dispatch_keys:
        kernel = as_registered(spec.fn, differentiable, qualname, "the function", n, schema, fake)
        reg.impl(spec.opname, kernel.kernel, key, "fallback")
        for device in DeviceKernels.fallback_devices(key):
            fallbacks[device] = kernel
    reg.fake(spec.opname, checked_arity(fake, qualname, "fake_fn", n), "fake")
    return main, fallbacks


def add_batching(
    spec: OpSpec, reg: Registrar, main: Overload, *, fast: bool = True
) -> tuple[Overload | None, BatchingRules | None]:
    """With ``vmap_fn``: the batched op (its kernels and fake) and both vmap rules. Without it,
    opreg's per-sample loop (``BatchingRules.loop_rule``), what PyTorch's own fallback
    computes, without its "performance drop" warning on every call (torch 2.15 shows it) and
    also for the ops that fallback refuses: those returning a list or a plain value, taking
    a list of tensors (``Tensor[]``, ``Tensor?[]``), or writing to an argument (each entry's
    slice is a view of the batched argument, so the write lands there). A written argument
    must be batched wherever another is (``BatchingRules._check_mutated``)."""
    o = spec.options
    qualname, opname, n = spec.qualname, spec.opname, spec.num_returns
    if o["vmap_fn"] is None:
        rules = BatchingRules(spec, entry_point(main), entry_point(main))
        reg.impl(opname, rules.loop_rule, "FuncTorchBatched", "per-sample vmap loop")
        return None, rules
    assert o["fake_vmap_fn"] is not None  # resolve() requires it with vmap_fn
    name = opname + BATCHED_SUFFIX
    batched = reg.define(name, spec.signature.schema)
    schema = spec.signature.schema
    kernels = {}
    for key in spec.dispatch_keys:
        kernel = as_registered(
            o["vmap_fn"], o["differentiable"], qualname, "vmap_fn", n, schema
        ).kernel
        reg.impl(name, kernel, key, "vmap_fn")
        kernels[key] = kernel
    reg.fake(name, checked_arity(o["fake_vmap_fn"], qualname, "fake_vmap_fn", n), "fake_vmap_fn")
    # One kernel for every device and no version counter to bump: the vmap rule may call it
    # without the dispatcher where nothing else needs it (the short path, see _batching).
    # (Neither on an untested torch: the speed paths are off there, see ``_versions``.)
    direct = kernel if o["device_types"] is None and not spec.signature.mutated else None
    direct = direct if fast else None
    rules = BatchingRules(
        spec,
        entry_point(main),
        entry_point(batched),
        direct=direct,
        level_keys=vmap_level_keys() if direct is not None else None,
        nograd_op=add_nograd_twin(spec, reg, kernels) if fast else None,
        fast=fast,
    )
    reg.impl(opname, rules.op_rule, "FuncTorchBatched", "vmap rule")
    reg.impl(name, rules.batched_rule, "FuncTorchBatched", "nested vmap rule")
    return batched, rules


def add_nograd_twin(spec: OpSpec, reg: Registrar, kernels: dict[str, Any]) -> Any:
    """The batched op's twin without an autograd kernel (its ``Autograd`` key falls through):
    the last vmap level calls it where the batched op's autograd kernel would only redispatch,
    saving that Python crossing. None where it would save nothing (a non-differentiable op's
    batched op has no autograd kernel) or needs more (a mutating op's version counters).
    ``kernels``: the batched op's, per dispatch key (the twin shares them)."""
    if not spec.options["differentiable"] or spec.signature.mutated:
        return None
    assert spec.options["fake_vmap_fn"] is not None  # resolve() requires it with vmap_fn
    name = spec.opname + NOGRAD_SUFFIX
    twin = reg.define(name, spec.signature.schema)
    for key in spec.dispatch_keys:
        reg.impl(name, kernels[key], key, "vmap_fn")
    fake = checked_arity(
        spec.options["fake_vmap_fn"], spec.qualname, "fake_vmap_fn", spec.num_returns
    )
    reg.fake(name, fake, "fake_vmap_fn")
    reg.impl(name, torch.library.fallthrough_kernel, "Autograd", "no autograd (nothing needs it)")
    return entry_point(twin)


def add_autocast_kernels(
    spec: OpSpec, reg: Registrar, operators: list[tuple[str, Callable[..., Any]]]
) -> None:
    """The ``autocast`` rule (``_autocast``): for each device type it names, a kernel on its
    autocast key of each operator (the op, its batched op and its twin: vmap calls those below
    its levels, where autocast then applies). ``operators``: (name, entry point) pairs."""
    if spec.autocast_rule is None:
        return
    for device_type, target in spec.autocast_rule.items():
        for name, entry in operators:
            key, kernel = make_autocast_kernel(entry, device_type, target)
            reg.impl(name, kernel, key, f"autocast rule ({device_type})")


def add_mutation_kernels(spec: OpSpec, reg: Registrar, targets: list[tuple[str, Overload]]) -> None:
    """Version-counter bumps of the mutated inputs, on the op and its batched op."""
    for name, overload in targets:
        kernel = make_mutation_kernel(overload, spec.signature)
        reg.impl(name, kernel, "ADInplaceOrView", "version counter bump", with_keyset=True)


def add_autograd_kernels(
    spec: OpSpec, reg: Registrar, targets: list[tuple[str, Overload]], *, fast: bool = True
) -> DirectRecord | None:
    """The op's autograd kernel (the user's backward and jvp) and the batched op's (derived by
    vmap); a fallthrough for a non-differentiable op. Returns how the direct call records a
    call of the op (``AutogradKernel.record``; None for a non-differentiable op). ``fast``:
    the Functions' graph nodes call their backward themselves (a tested torch)."""
    o = spec.options
    if not o["differentiable"]:
        for name, _ in targets:
            reg.impl(name, torch.library.fallthrough_kernel, "Autograd", "non-differentiable")
        return None
    qualname, signature = spec.qualname, spec.signature
    user_backward = o["backward"] is not None
    backward = o["backward"] or non_differentiable_backward(qualname)
    (name, main), *batched = targets
    autograd = make_autograd_kernel(
        qualname,
        main,
        signature,
        o["setup_context"],
        backward,
        user_backward=user_backward,
        jvp=o["jvp"],
        user_jvp=True,
        fast=fast,
    )
    reg.impl(name, autograd.kernel, "Autograd", "autograd", with_keyset=True)
    for name, overload in batched:
        setup_b, backward_b = derive_batched_backward(
            qualname, signature.names, spec.out_dims, o["setup_context"], backward
        )
        jvp_b = (
            None
            if o["jvp"] is None
            else derive_batched_jvp(qualname, spec.out_dims, o["setup_context"], o["jvp"])
        )
        derived = make_autograd_kernel(
            qualname, overload, signature, setup_b, backward_b, jvp=jvp_b, fast=fast
        )
        reg.impl(name, derived.kernel, "Autograd", "derived autograd", with_keyset=True)
    return autograd.record


def make_op(
    spec: OpSpec,
    reg: Registrar,
    main: Overload,
    batched: Overload | None,
    rules: BatchingRules | None,
    kernels: DeviceKernels,
    call: Callable[..., Any] | None,
    record: DirectRecord | None,
) -> VmapOp[Any, Any]:
    """The op object and its :class:`OpState`, the one place both are constructed. Its call is
    the direct call (``_call_path``), or where that does not apply the operator's C++ entry
    point (no Python frame per call)."""
    state = OpState(
        spec=spec,
        overload=main,
        batched_overload=batched,
        call=entry_point(main) if call is None else call,
        device_kernels=kernels,
        # The batching rules read the same dict (a device kernel turns their short path off).
        handles=rules.kernels if rules is not None else {},
        record=record,
        vmap_stats=rules.stats if rules is not None else VmapStats(),
        registrations=tuple(reg.done),
        libs=[reg.lib],
    )
    return VmapOp._create(state)
