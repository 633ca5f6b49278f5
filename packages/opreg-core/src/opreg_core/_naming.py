"""Operator names: the default derived from a function, and validation of given names.

Rule for the default name: ``<namespace>::<opname>`` where the namespace is the function's
module (``fn.__module__``) and the opname is its ``__name__``, each with every character
that is not a letter, digit or underscore replaced by ``_``, leading and trailing underscores
stripped,
and ``op_`` prefixed when the result would start with a digit or be empty.
So ``fused_add`` in module ``mylib.ops`` becomes ``mylib_ops::fused_add``, and two
libraries only collide if they have the same module path and function name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_NOT_IDENTIFIER_CHAR = re.compile(r"[^A-Za-z0-9_]")

#: Namespaces that belong to PyTorch itself; registering into them would shadow its operators.
RESERVED_NAMESPACES = frozenset(
    {
        "aten",
        "prim",
        "prims",
        "torch",
        "_",
        "c10",
        "quantized",
        "profiler",
        "inductor",
        "higher_order",
    }
)
#: Suffix of the batched operator that opreg defines next to each op with a ``vmap_fn``.
BATCHED_SUFFIX = "__opreg_batched"


def _sanitize(part: str) -> str:
    cleaned = _NOT_IDENTIFIER_CHAR.sub("_", part).strip("_")
    if not cleaned or cleaned[0].isdigit():
        cleaned = "op_" + cleaned
    return cleaned


def default_name(fn: Callable[..., Any]) -> str:
    """The qualified name opreg gives ``fn`` when no ``name`` is passed (see module docstring)."""
    module = getattr(fn, "__module__", None) or "opreg_anonymous"
    opname = getattr(fn, "__name__", None) or "op"
    return f"{_sanitize(module)}::{_sanitize(opname)}"


def split_name(name: object) -> tuple[str, str]:
    """Validate a ``"namespace::opname"`` string and return its two parts.

    Raises ``TypeError`` for a non-string and ``ValueError`` naming the problem otherwise.
    """
    if not isinstance(name, str):
        raise TypeError(
            f"opreg: name must be a string 'namespace::opname', got {type(name).__name__}"
        )
    parts = name.split("::")
    if len(parts) != 2:
        raise ValueError(f"opreg: name {name!r} must have the form 'namespace::opname'")
    namespace, opname = parts
    for kind, part in (("namespace", namespace), ("operator name", opname)):
        if not _IDENTIFIER.match(part):
            raise ValueError(
                f"opreg: {kind} {part!r} in name {name!r} must start with a letter and contain "
                "only letters, digits and underscores"
            )
    if "." in opname:
        raise ValueError(f"opreg: name {name!r} must not name an overload")
    if namespace in RESERVED_NAMESPACES:
        raise ValueError(
            f"opreg: namespace {namespace!r} in name {name!r} is reserved for PyTorch; "
            "use your library's own namespace"
        )
    if opname.endswith(BATCHED_SUFFIX):
        raise ValueError(
            f"opreg: name {name!r} ends with {BATCHED_SUFFIX!r}, which opreg reserves for the "
            "batched operators it defines"
        )
    return namespace, opname
