"""The process-wide registry of opreg ops, for re-registration and for the checking tools.

It only records ops; ``_register`` registers them and takes them apart again (``unregister``).
"""

from __future__ import annotations

import weakref
from typing import Any

from ._op import VmapOp
from ._registry_lock import registry_lock

_ops: dict[str, VmapOp[Any, Any]] = {}
#: Earlier handles of each name, updated on re-registration so every handle is the live op.
_earlier: dict[str, list[weakref.ref[VmapOp[Any, Any]]]] = {}


def lookup(qualname: str) -> VmapOp[Any, Any] | None:
    return _ops.get(qualname)


def add(op: VmapOp[Any, Any], *, follow: bool = True) -> None:
    """Record ``op``; earlier handles of its name become the same op (attributes and calls).
    With ``follow=False`` (the name was taken over by another definition) they do not: each
    raises when called, naming the op and the definition that replaced it."""
    previous = _ops.get(op.qualname)
    handles = _earlier.setdefault(op.qualname, [])
    if previous is not None:
        handles.append(weakref.ref(previous))
    alive = []
    for ref in handles:
        old = ref()
        if old is None:
            continue
        if not follow:
            setattr(type(old), "__call__", _replaced(old, op))  # noqa: B010
            continue  # a stale handle stays stale, whatever registers the name later
        old.__dict__.update(op.__dict__)
        # The new op's call (the direct call, or the dispatcher's entry point).
        setattr(type(old), "__call__", type(op).__dict__["__call__"])  # noqa: B010
        alive.append(ref)
    handles[:] = alive
    _ops[op.qualname] = op


def definition(fn: object) -> str:
    """Where ``fn`` was defined: ``module:qualname``, and ``(file:line)`` where known."""
    module = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    code = getattr(fn, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"{module}:{name}{where}"


def _replaced(old: VmapOp[Any, Any], new: VmapOp[Any, Any]) -> Any:
    """The ``__call__`` of a handle whose name another definition took over: a clear error
    rather than the other definition's values."""
    message = (
        f"opreg: {old.qualname}: this handle's op ({definition(old.fallback)}) was replaced by "
        f"{definition(new.fallback)}, which registered the same name: call the op that "
        f"registration returned (opreg_core.get_op({old.qualname!r})), or give one of them "
        "another name="
    )

    def replaced(self: object, /, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(message)

    return replaced


def registered_ops(module: str | None = None) -> tuple[VmapOp[Any, Any], ...]:
    """All live opreg ops, in registration order; with ``module``, only those whose function
    was defined in that module or one of its submodules."""
    with registry_lock():
        ops = tuple(_ops.values())
    if module is None:
        return ops
    return tuple(op for op in ops if op.module == module or op.module.startswith(module + "."))


def get_op(qualname: str) -> VmapOp[Any, Any]:
    """The opreg op registered as ``qualname`` (``"namespace::name"``)."""
    op = _ops.get(qualname)
    if op is None:
        raise KeyError(f"opreg: no op named {qualname!r} is registered")
    return op


def remove(qualname: str) -> VmapOp[Any, Any] | None:
    """Forget the op of ``qualname`` and its earlier handles; the op, or None if none."""
    with registry_lock():
        _earlier.pop(qualname, None)
        return _ops.pop(qualname, None)
