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
            old._replaced_by(op)
            continue  # a stale handle stays stale, whatever registers the name later
        old._adopt(op._state)  # the new op's state: its attributes and its call
        alive.append(ref)
    handles[:] = alive
    _ops[op.qualname] = op


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
