"""``register_vmap_op``: resolve the options, then build the op into the dispatcher; and its
inverse, ``unregister``.

:func:`_retire` is the one place that takes an op's registration apart (on ``unregister`` and
when its name is registered again): its kernels and libraries, its DTensor rule, and what
packages built on opreg-core attached to it (``VmapOp.extensions``: a value with a
``release()`` method has it called first, e.g. opreg-kernels' compiler-visible rules). An op
leaves nothing behind in any table of opreg's.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar, Unpack, cast, overload

from . import _registry
from ._build import build
from ._dtensor import register_sharding_rule
from ._errors import OpRedefinedWarning
from ._op import VmapOp, definition
from ._options import VmapOpOptions, check_option_names, resolve
from ._registrar import Registrar, check_name_free
from ._registry_lock import registry_lock

P = ParamSpec("P")
R = TypeVar("R")


def _register(fn: Callable[P, R], options: Mapping[str, Any]) -> VmapOp[P, R]:
    spec = resolve(fn, options)
    with registry_lock():
        previous = _registry.lookup(spec.qualname)
        takeover = previous is not None and not _same_definition(previous.fallback, fn)
        if previous is not None:
            _retire(previous)
        else:
            check_name_free(spec.qualname)
        reg = Registrar(spec.namespace)
        try:
            op = build(spec, reg)
        except BaseException:
            reg.lib.destroy()
            raise
        # Also with None: a re-registered name must not keep the earlier op's rule.
        register_sharding_rule(op, spec.options["sharding"])
        # Earlier handles of the name now call the new definition; after a takeover, they raise.
        _registry.add(op, follow=not takeover)
    if takeover:
        assert previous is not None  # for mypy: takeover implies an earlier op
        warnings.warn(
            f"opreg: {spec.qualname} was registered again by {definition(fn)}, "
            f"replacing {definition(previous.fallback)}: the earlier op's handles now "
            "raise when called; give one of them another name= if both are meant to exist",
            OpRedefinedWarning,
            stacklevel=3,
        )
    return cast(VmapOp[P, R], op)


def _same_definition(a: object, b: object) -> bool:
    """Whether ``a`` and ``b`` are the same definition run again (a notebook cell re-run, a
    reload): the same module and qualname."""

    def key(fn: object) -> tuple[object, object]:
        name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
        return getattr(fn, "__module__", None), name

    return key(a) == key(b)


def unregister(qualname: str) -> None:
    """Remove an op, every kernel opreg registered for it, its sharding rule and everything
    attached to it (``VmapOp.extensions``); tests use this for cleanup. An unknown name is
    ignored."""
    with registry_lock():
        op = _registry.remove(qualname)
        if op is not None:
            _retire(op)


def _retire(op: VmapOp[Any, Any]) -> None:
    """Take ``op``'s registration apart (see the module docstring)."""
    state = op._state
    for handle in list(state.handles.values()):
        handle.remove()
    for lib in state.libs:
        lib.destroy()
    state.libs.clear()
    state.device_kernels.clear()  # the direct call goes to the dispatcher, which refuses
    register_sharding_rule(op, None)  # DTensor forgets the op (pending or applied)
    errors: list[BaseException] = []
    for value in list(state.extensions.values()):
        release = getattr(value, "release", None)
        if callable(release):
            try:
                release()
            except Exception as exc:  # the other packages still release theirs
                errors.append(exc)
    state.extensions.clear()
    if errors:
        raise errors[0]


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
            Its outputs (and every kernel's) must be new tensors, not an input or a view of
            one, unless the schema declares the alias: the first call of each kernel raises
            otherwise, as ``torch.library.custom_op`` does.

    The keywords are the options, each declared and documented once, in
    :class:`VmapOpOptions` (its name, type, default and meaning); ``fake_fn`` is required. A
    wrapper can take ``**options: Unpack[VmapOpOptions]`` and forward them; an unknown
    keyword raises ``TypeError`` naming the nearest option.

    Registering a name that opreg registered before (re-running a notebook cell, a reload)
    replaces the earlier op: its kernels are removed, the new ones registered, and old handles
    of the op call the new definition. Registering it from another definition (another module
    or function qualname) takes the name over with an ``OpRedefinedWarning`` naming both, and
    the earlier op's handles raise when called. A name held by an operator opreg did not
    register is refused with ``ValueError``.
    """
    if fn is None:
        check_option_names(options)  # at decoration time, not when the decorator is applied

        def decorator(f: Callable[P, R]) -> VmapOp[P, R]:
            return _register(f, options)

        return decorator
    return _register(fn, options)
