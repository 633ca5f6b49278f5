"""``register_vmap_op``: validate the options, then put every kernel into the dispatcher."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, Unpack, overload

import torch
from torch._ops import OpOverload

from . import _registry
from ._autograd import (
    below_autograd,
    derive_batched_backward,
    derive_batched_jvp,
    make_autograd_kernel,
    make_mutation_kernel,
    non_differentiable_backward,
)
from ._batching import BatchingRules, VmapStats
from ._devices import device_type_name, dispatch_key_for
from ._naming import BATCHED_SUFFIX, default_name, split_name
from ._op import KernelHandle, Registration, VmapOp
from ._options import (
    DEFAULTS,
    Options,
    VmapOpOptions,
    as_names,
    check_callable,
    check_mutates_args,
    check_option_names,
    normalize_out_dims,
    validate,
)
from ._sharding import register_sharding_rule, sharding_rule
from ._signature import Signature, infer_schema, parse_signature
from ._torch_private import Library, operator_exists

P = ParamSpec("P")
R = TypeVar("R")


def checked_arity(
    kernel: Callable[..., Any], qualname: str, label: str, num_returns: int
) -> Callable[..., Any]:
    """Guard a kernel of a multi-output op against returning the wrong number of outputs.

    PyTorch accepts a Python kernel's tuple of the wrong length and corrupts the dispatcher's
    stack (a crash later); single-output ops get a clean error from PyTorch and stay unwrapped.
    """
    if num_returns <= 1:
        return kernel

    def guarded(*args: Any, **kwargs: Any) -> Any:
        out = kernel(*args, **kwargs)
        if not isinstance(out, (tuple, list)) or len(out) != num_returns:
            got = f"{len(out)} outputs" if isinstance(out, (tuple, list)) else type(out).__name__
            raise RuntimeError(
                f"opreg: {qualname}: {label} returned {got}, the op declares {num_returns} outputs"
            )
        return out

    return guarded


def _kernel(
    kernel: Callable[..., Any], differentiable: bool, qualname: str, label: str, num_returns: int
) -> Callable[..., Any]:
    """A kernel as registered: arity-checked, and run below autograd for a non-differentiable
    op (whose ``Autograd`` key is a fallthrough)."""
    checked = checked_arity(kernel, qualname, label, num_returns)
    return checked if differentiable else below_autograd(checked)


def _check_free(qualname: str) -> None:
    """Refuse a name that an operator not registered by opreg already has."""
    namespace, opname = qualname.split("::")
    for name in (opname, opname + BATCHED_SUFFIX):
        if not operator_exists(f"{namespace}::{name}"):
            continue
        raise ValueError(
            f"opreg: {qualname}: an operator named {namespace}::{name} already exists and was not "
            "registered by opreg; choose another name=..."
        )


class _Registrar:
    """Puts one op's kernels into a ``torch.library.Library`` and records what it registered."""

    def __init__(self, namespace: str) -> None:
        self.lib = Library(namespace)
        self.namespace = namespace
        self.done: list[Registration] = []

    def define(self, opname: str, schema: str) -> OpOverload[..., Any]:
        self.lib.define(f"{opname}{schema}")
        self.done.append(Registration(f"{self.namespace}::{opname}", "", "definition"))
        packet = getattr(getattr(torch.ops, self.namespace), opname)
        return packet.default  # type: ignore[no-any-return]

    def impl(
        self, opname: str, kernel: Any, key: str, what: str, with_keyset: bool = False
    ) -> None:
        self.lib.impl(opname, kernel, key, with_keyset=with_keyset)
        self.done.append(Registration(f"{self.namespace}::{opname}", key, what))

    def fake(self, opname: str, fake: Callable[..., Any], what: str) -> None:
        self.lib.register_fake(f"{self.namespace}::{opname}", fake)
        self.done.append(Registration(f"{self.namespace}::{opname}", "Meta", what))


def _register(fn: Callable[P, R], o: Options) -> VmapOp[P, R]:
    if not callable(fn):
        raise TypeError(f"opreg: register_vmap_op expects a function, got {type(fn).__name__}")
    qualname = default_name(fn) if o.name is None else o.name
    namespace, opname = split_name(qualname)
    validate(fn, qualname, o)
    mutated = as_names(qualname, "mutates_args", o.mutates_args)
    check_mutates_args(fn, qualname, mutated)
    device_types = (
        None if o.device_types is None else as_names(qualname, "device_types", o.device_types)
    )
    try:
        keys = (
            ["CompositeExplicitAutograd"]
            if device_types is None
            else [dispatch_key_for(d) for d in device_types]
        )
    except ValueError as exc:
        raise ValueError(f"opreg: {qualname}: device_types: {exc}") from exc
    schema = infer_schema(qualname, fn, o.schema, mutated)
    signature = parse_signature(qualname, schema)
    if o.schema is not None and set(mutated) != set(signature.mutated):
        raise ValueError(
            f"opreg: {qualname}: mutates_args {list(mutated)} disagrees with the schema, which "
            f"marks {list(signature.mutated)} as mutated"
        )
    out_dims = normalize_out_dims(qualname, o.vmap_out_dims, signature.num_returns)
    if o.sharding is not None:
        sharding_rule(o.sharding, qualname)  # refuse a bad rule before registering anything
    if o.jvp is not None and signature.returns_list:
        raise ValueError(
            f"opreg: {qualname}: jvp is not supported for ops that return a list of tensors "
            "(autograd tracks no tangent on a list output); return a tuple of tensors instead"
        )
    for label in ("backward", "jvp"):
        if signature.mutated and getattr(o, label) is not None:
            raise ValueError(
                f"opreg: {qualname}: {label} is not supported for ops that mutate their arguments"
            )

    with _registry.registry_lock():
        previous = _registry.lookup(qualname)
        if previous is not None:
            _registry.destroy(previous)
        else:
            _check_free(qualname)
        reg = _Registrar(namespace)
        try:
            op = _build(
                fn, o, reg, qualname, opname, keys, signature, out_dims, mutated, device_types
            )
        except BaseException:
            reg.lib.destroy()
            raise
        # Also with None: a re-registered name must not keep the earlier op's rule.
        op.__dict__["sharding"] = register_sharding_rule(op, o.sharding)
        _registry.add(op)  # earlier handles of the name now call the new definition
    return op


def _build(
    fn: Callable[P, R],
    o: Options,
    reg: _Registrar,
    qualname: str,
    opname: str,
    keys: list[str],
    signature: Signature,
    out_dims: tuple[int | None, ...],
    mutated: tuple[str, ...],
    device_types: tuple[str, ...] | None,
) -> VmapOp[P, R]:
    assert o.fake_fn is not None  # checked by _validate
    n = signature.num_returns
    main = reg.define(opname, signature.schema)
    for key in keys:
        reg.impl(
            opname, _kernel(fn, o.differentiable, qualname, "the function", n), key, "fallback"
        )
    reg.fake(opname, checked_arity(o.fake_fn, qualname, "fake_fn", n), "fake")

    batched: OpOverload[..., Any] | None = None
    rules: BatchingRules | None = None
    batched_name = opname + BATCHED_SUFFIX
    if o.vmap_fn is not None:
        assert o.fake_vmap_fn is not None  # checked by _validate
        batched = reg.define(batched_name, signature.schema)
        for key in keys:
            kernel = _kernel(o.vmap_fn, o.differentiable, qualname, "vmap_fn", n)
            reg.impl(batched_name, kernel, key, "vmap_fn")
        reg.fake(
            batched_name, checked_arity(o.fake_vmap_fn, qualname, "fake_vmap_fn", n), "fake_vmap_fn"
        )
        rules = BatchingRules(
            qualname, main._op, batched._op, out_dims, o.vmap_wrap_inputs, o.max_vmap_level
        )
        reg.impl(opname, rules.op_rule, "FuncTorchBatched", "vmap rule")
        reg.impl(batched_name, rules.batched_rule, "FuncTorchBatched", "nested vmap rule")
    elif signature.returns_list:
        # PyTorch's per-sample fallback cannot stack list outputs; loop here instead.
        rules = BatchingRules(qualname, main._op, main._op, out_dims, None, None)
        reg.impl(opname, rules.loop_rule, "FuncTorchBatched", "per-sample vmap loop")

    if signature.mutated:
        for name, target in ((opname, main), (batched_name, batched)):
            if target is not None:
                reg.impl(
                    name,
                    make_mutation_kernel(target, signature),
                    "ADInplaceOrView",
                    "version counter bump",
                    with_keyset=True,
                )

    if not o.differentiable:
        for name, target in ((opname, main), (batched_name, batched)):
            if target is not None:
                reg.impl(name, torch.library.fallthrough_kernel, "Autograd", "non-differentiable")
    else:
        backward = o.backward if o.backward is not None else non_differentiable_backward(qualname)
        reg.impl(
            opname,
            make_autograd_kernel(
                qualname,
                main,
                signature,
                o.setup_context,
                backward,
                user_backward=o.backward is not None,
                jvp=o.jvp,
                user_jvp=True,
            ),
            "Autograd",
            "autograd",
            with_keyset=True,
        )
        if batched is not None:
            setup_b, backward_b = derive_batched_backward(
                qualname, signature.names, out_dims, o.setup_context, backward
            )
            jvp_b = (
                None
                if o.jvp is None
                else derive_batched_jvp(qualname, out_dims, o.setup_context, o.jvp)
            )
            reg.impl(
                batched_name,
                make_autograd_kernel(qualname, batched, signature, setup_b, backward_b, jvp=jvp_b),
                "Autograd",
                "derived autograd",
                with_keyset=True,
            )

    cls = type(f"VmapOp_{qualname.replace('::', '__')}", (VmapOp,), {"__call__": main._op})
    op: VmapOp[P, R] = object.__new__(cls)
    op.__dict__.update(main.__dict__)
    op.__dict__.update(
        qualname=qualname,
        namespace=reg.namespace,
        opname=opname,
        overload=main,
        batched_overload=batched,
        fallback=fn,
        fake_fn=o.fake_fn,
        vmap_fn=o.vmap_fn,
        fake_vmap_fn=o.fake_vmap_fn,
        vmap_wrap_inputs=o.vmap_wrap_inputs,
        vmap_out_dims=out_dims,
        max_vmap_level=o.max_vmap_level,
        mutates_args=mutated,
        device_types=device_types,
        schema=signature.schema,
        backward=o.backward,
        setup_context=o.setup_context,
        jvp=o.jvp,
        differentiable=o.differentiable,
        sample_inputs=o.sample_inputs,
        module=getattr(fn, "__module__", None) or "",
        registrations=tuple(reg.done),
        vmap_stats=rules.stats if rules is not None and batched is not None else VmapStats(),
        _kernels={},
        _libs=[reg.lib],
        extensions={},
        __doc__=getattr(fn, "__doc__", None),
        __wrapped__=fn,
    )
    return op


def add_kernel(
    op: VmapOp[Any, Any], device_type: str, kernel: Callable[..., Any], batched: bool
) -> KernelHandle:
    """Implementation of :meth:`VmapOp.register_kernel`."""
    check_callable(op.qualname, "kernel", kernel, required=True)
    try:
        key = dispatch_key_for(device_type)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"opreg: {op.qualname}: register_kernel: {exc}") from exc
    if batched and op.batched_overload is None:
        raise ValueError(
            f"opreg: {op.qualname}: register_kernel(batched=True) needs an op registered "
            "with vmap_fn"
        )
    device = device_type_name(device_type)
    with _registry.registry_lock():
        old = op._kernels.get((device, batched))
        if old is not None:
            old.remove()
        lib = Library(op.namespace)
        name = op.opname + (BATCHED_SUFFIX if batched else "")
        n = len(op.vmap_out_dims)
        label = f"the {device} kernel" + (" (batched)" if batched else "")
        wrapped = _kernel(kernel, op.differentiable, op.qualname, label, n)
        lib.impl(name, wrapped, key, allow_override=True)
        handle = KernelHandle(op, device, batched, lib)
        op._kernels[(device, batched)] = handle
    return handle


@overload
def register_vmap_op(fn: Callable[P, R], /, **options: Unpack[VmapOpOptions]) -> VmapOp[P, R]: ...


@overload
def register_vmap_op(
    fn: None = None, /, **options: Unpack[VmapOpOptions]
) -> Callable[[Callable[P, R]], VmapOp[P, R]]: ...


def register_vmap_op(
    fn: Callable[P, R] | None = None, /, **options: Unpack[VmapOpOptions]
) -> VmapOp[P, R] | Callable[[Callable[P, R]], VmapOp[P, R]]:
    """Register ``fn`` as a PyTorch operator that works in eager, compile, vmap and autograd.

    Args:
        fn: the pure-PyTorch implementation (the fallback, used on every device). Only ``fn``
            needs type annotations: the schema is built from them (or given as ``schema``).
        fake_fn: required; computes output metadata (shapes, dtypes) for ``torch.compile``.
        vmap_fn: the batched implementation, written for ONE leading batch dim: every tensor
            argument has its batch dim at 0 (unbatched ones are expanded to the batch without a
            copy); non-tensor arguments pass through. Nested vmap at any depth calls it once.
        fake_vmap_fn: required with ``vmap_fn``; the batched op's fake.
        vmap_wrap_inputs: ``(info, in_dims, *args) -> args`` replaces the default input handling
            at the innermost level (``in_dims`` has one entry per positional argument: an int
            or None, or a list of them for a list of tensors).
        vmap_out_dims: where ``vmap_fn``'s outputs carry the batch dim (int, None, or a tuple
            per output).
        max_vmap_level: the deepest vmap nesting handled by ``vmap_fn``; deeper levels run a
            per-sample loop. ``None`` (default): unlimited.
        name: ``"namespace::opname"``; default ``<fn.__module__>::<fn.__name__>`` with
            non-identifier characters replaced by ``_`` (see ``opreg_core._naming``).
        mutates_args: as in ``torch.library.custom_op``.
        device_types: as in ``torch.library.custom_op``: where the fallback (and
            ``vmap_fn``) is registered.
        schema: as in ``torch.library.custom_op``.
        backward: autograd, with ``setup_context``: see that parameter.
        setup_context: autograd, as in ``torch.library.register_autograd``, except that
            ``setup_context`` receives all inputs in declaration order (kwarg-only ones last).
            Works under ``.backward()``, ``torch.func.grad``/``jacrev``/``vjp`` and with vmap;
            the batched op's backward is derived from this one.
        jvp: forward-mode AD: ``jvp(ctx, *input_tangents) -> output tangent(s)``, with the
            ``ctx`` filled by ``setup_context`` (its ``saved_tensors`` included) and one tangent
            per input in declaration order (None for non-tensor inputs and inputs without a
            tangent; a list for a list of tensors). Return one tangent per output, of the
            output's shape (None for no tangent). Works under ``torch.func.jvp``/``jacfwd``/
            ``hessian``, dual tensors (``torch.autograd.forward_ad``) and their compositions
            with ``vmap``, ``grad`` and ``jacrev``; the batched op's jvp is derived from this
            one. Without it forward mode through the op raises.
        differentiable: ``False`` declares the outputs non-differentiable by nature (random
            numbers, indices): no gradient flows, and calls take the cheapest dispatch path.
        sample_inputs: ``(device) -> Iterable[SampleInput]`` used by the opreg-testing checks.
        sharding: how the op runs on ``DTensor`` arguments: ``"elementwise"``, ``"rowwise"``,
            ``"replicate"``, a ``ShardingRule`` or a ``register_sharding``-style function (see
            ``opreg_core.register_sharding_rule``). None: no rule (DTensor refuses the op).

    Registering a name that opreg registered before (re-running a notebook cell, a reload)
    replaces the earlier op: its kernels are removed, the new ones registered, and old handles
    of the op call the new definition. A name held by an operator opreg did not register is
    refused with ``ValueError``.
    """
    check_option_names(options)
    resolved = Options(**{**DEFAULTS, **options})  # type: ignore[arg-type]
    if fn is None:

        def decorator(f: Callable[P, R]) -> VmapOp[P, R]:
            return _register(f, resolved)

        return decorator
    return _register(fn, resolved)
