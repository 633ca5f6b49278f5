"""Throwaway op namespaces: register ops under a unique name, remove them all afterwards."""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opreg_core import VmapOp, registered_ops, unregister

_PREFIX = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_counter = itertools.count()


@dataclass(frozen=True)
class OpNamespace:
    """A unique operator namespace; ``ns.qualname("scale")`` gives ``"<namespace>::scale"``."""

    name: str

    def qualname(self, opname: str) -> str:
        """The qualified name to pass as ``register_vmap_op(..., name=...)``."""
        return f"{self.name}::{opname}"

    def ops(self) -> tuple[VmapOp[Any, Any], ...]:
        """The opreg ops currently registered in this namespace."""
        return tuple(op for op in registered_ops() if op.namespace == self.name)

    def clear(self) -> None:
        """Unregister every opreg op of the namespace (and the kernels added to them)."""
        for op in self.ops():
            unregister(op.qualname)

    def __str__(self) -> str:
        return self.name


def unique_namespace(prefix: str = "opreg_test") -> OpNamespace:
    """A namespace no other call in any process returns (prefix, process id, counter)."""
    if not isinstance(prefix, str) or not _PREFIX.match(prefix):
        raise ValueError(
            f"namespace prefix must be an identifier starting with a letter, got {prefix!r}"
        )
    return OpNamespace(f"{prefix}_{os.getpid()}_{next(_counter)}")


@contextmanager
def fresh_namespace(prefix: str = "opreg_test") -> Iterator[OpNamespace]:
    """A unique namespace for the block; every opreg op registered in it is removed on exit."""
    namespace = unique_namespace(prefix)
    try:
        yield namespace
    finally:
        namespace.clear()
