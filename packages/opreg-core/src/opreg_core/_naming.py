"""Operator names: the default derived from a function, and validation of given names.

Rule for the default name: ``<namespace>::<opname>`` where the namespace is the function's
module (``fn.__module__``) and the opname is its ``__name__``, each with every character
that is not a letter, digit or underscore replaced by ``_``, leading and trailing underscores
stripped,
and ``op_`` prefixed when the result would start with a digit or be empty.
So ``fused_add`` in module ``mylib.ops`` becomes ``mylib_ops::fused_add``, and two
libraries only collide if they have the same module path and function name.

A given name is accepted when ``torch.library`` accepts it: namespace and operator name are
ASCII identifiers (letters, digits, underscores, not starting with a digit; leading
underscores included, as in EvoX's ``evox::_custom_op_foo``) that ``torch.ops.<ns>.<op>``
can reach, in a namespace that is not PyTorch's own.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import torch

from ._private import OpOverloadPacket

#: What torch's schema parser accepts as a namespace or an operator name.
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NOT_IDENTIFIER_CHAR = re.compile(r"[^A-Za-z0-9_]")
#: Names that torch.ops' namespace objects refuse to look up as operators.
_REFUSED_OPNAMES = frozenset({"__origin__", "__self__"})
_MISSING = object()

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
#: Suffix of the batched operator's twin without an autograd kernel (see ``_batching``).
NOGRAD_SUFFIX = "__opreg_batched_nograd"


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
    if "." in opname:
        raise ValueError(f"opreg: name {name!r} must not name an overload")
    for kind, part in (("namespace", namespace), ("operator name", opname)):
        if not _IDENTIFIER.fullmatch(part):
            raise ValueError(
                f"opreg: {kind} {part!r} in name {name!r} must be an identifier: ASCII "
                "letters, digits and underscores, not starting with a digit"
            )
    if namespace in RESERVED_NAMESPACES:
        raise ValueError(
            f"opreg: namespace {namespace!r} in name {name!r} is reserved for PyTorch; "
            "use your library's own namespace"
        )
    for suffix in (BATCHED_SUFFIX, NOGRAD_SUFFIX):
        if opname.endswith(suffix):
            raise ValueError(
                f"opreg: name {name!r} ends with {suffix!r}, which opreg reserves for the "
                "batched operators it defines"
            )
    shadowed = _shadowing_attribute(namespace, opname)
    if shadowed:
        raise ValueError(
            f"opreg: {shadowed} in name {name!r} is taken by torch.ops itself, so "
            f"torch.ops.{namespace}.{opname} could not reach the operator; choose another name"
        )
    return namespace, opname


def _shadowing_attribute(namespace: str, opname: str) -> str:
    """Which part of the name an attribute of ``torch.ops`` or of its namespace objects
    shadows (``"namespace 'load_library'"``, ``"operator name '__init__'"``), else ``""``.

    ``torch.library`` fails on such names too (``custom_op("ns::name", ...)`` raises an
    AttributeError), after defining the schema."""
    namespace_type = type(torch.ops.aten)
    found = inspect.getattr_static(torch.ops, namespace, _MISSING)
    if found is not _MISSING and not isinstance(found, namespace_type):
        return f"namespace {namespace!r}"
    # A namespace object not made yet has the attributes of any other (its operators aside).
    space = found if found is not _MISSING else torch.ops.aten
    attribute = inspect.getattr_static(space, opname, _MISSING)
    if opname in _REFUSED_OPNAMES or not (
        attribute is _MISSING or isinstance(attribute, OpOverloadPacket)
    ):
        return f"operator name {opname!r}"
    return ""
