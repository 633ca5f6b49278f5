"""Explicit op names: every name torch.library accepts, leading underscores included (EvoX
generates ``evox::_custom_op_<name>``); PyTorch's own namespaces stay refused."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.func import grad, vmap

from opreg_core import register_vmap_op, unregister


def _inc(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def _fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _register(name: str) -> Any:
    return register_vmap_op(
        _inc,
        fake_fn=_fake,
        vmap_fn=_inc,
        fake_vmap_fn=_fake,
        backward=lambda ctx, g: g,
        name=name,
    )


def _works(op: Any, qualname: str) -> None:
    """The op runs eagerly, through torch.ops, under vmap (its batched op) and grad."""
    namespace, opname = qualname.split("::")
    x = torch.arange(6.0).reshape(2, 3)
    assert op.qualname == qualname and (op.namespace, op.opname) == (namespace, opname)
    torch.testing.assert_close(op(x), x + 1)
    torch.testing.assert_close(getattr(getattr(torch.ops, namespace), opname).default(x), x + 1)
    torch.testing.assert_close(vmap(vmap(op))(x), x + 1)
    assert op.vmap_stats.fast == 1 and op.vmap_stats.nested == 1
    torch.testing.assert_close(grad(lambda t: op(t).sum())(x), torch.ones_like(x))


@pytest.mark.parametrize("opname", ["_custom_op_foo", "__double_leading", "__dunder__", "_", "_1"])
def test_leading_underscore_op_names_are_accepted(ns: str, opname: str) -> None:
    qualname = f"{ns}::{opname}"
    _works(_register(qualname), qualname)


@pytest.mark.parametrize("prefix", ["_", "__"])
def test_leading_underscore_namespaces_are_accepted(ns: str, prefix: str) -> None:
    qualname = f"{prefix}{ns}::_custom_op_foo"
    try:
        _works(_register(qualname), qualname)
    finally:
        unregister(qualname)


def _torch_library_accepts(qualname: str) -> bool:
    """Whether ``torch.library.custom_op`` defines a callable op of this name."""
    namespace, opname = qualname.split("::")
    try:
        torch.library.custom_op(qualname, mutates_args=())(_inc)
        packet = getattr(getattr(torch.ops, namespace), opname)
        return bool(torch.equal(packet.default(torch.zeros(2)), torch.ones(2)))
    except (RuntimeError, AttributeError, ValueError):
        return False


def _opreg_accepts(qualname: str) -> bool:
    try:
        _register(qualname)
    except ValueError:
        return False
    unregister(qualname)
    return True


# Operator names: identifiers torch's schema parser takes (letters, digits, underscores, not
# starting with a digit), except those torch.ops' namespace objects have as attributes.
OPNAMES = ["_custom_op_foo", "__x__", "_", "op_", "op1", "CamelCase", "__call__"]
BAD_OPNAMES = ["1op", "o-p", "o p", "op\n", "é", "name", "__init__", "__class__", "__dict__"]


@pytest.mark.parametrize("opname", OPNAMES + BAD_OPNAMES)
def test_accepts_exactly_the_op_names_torch_library_accepts(ns: str, opname: str) -> None:
    torch_accepts = _torch_library_accepts(f"{ns}_torch::{opname}")
    assert torch_accepts == (opname in OPNAMES)
    assert _opreg_accepts(f"{ns}::{opname}") == torch_accepts


@pytest.mark.parametrize("namespace", ["1ns", "my-lib", "my.lib", "é"])
def test_namespaces_that_are_not_identifiers_are_refused(namespace: str) -> None:
    with pytest.raises(ValueError, match=rf"namespace '{namespace}' .* must be an identifier"):
        _register(f"{namespace}::op")


@pytest.mark.parametrize(
    ("name", "part"),
    [
        ("ns_ok::name", "operator name 'name'"),
        ("ns_ok::__init__", "operator name '__init__'"),
        ("ns_ok::__origin__", "operator name '__origin__'"),
        ("load_library::op", "namespace 'load_library'"),
        ("__init__::op", "namespace '__init__'"),
    ],
)
def test_names_torch_ops_cannot_reach_are_refused_clearly(name: str, part: str) -> None:
    with pytest.raises(ValueError, match=rf"{part} in name .* is taken by torch.ops itself"):
        _register(name)


@pytest.mark.parametrize("namespace", ["aten", "prims", "torch", "_", "higher_order"])
def test_reserved_namespaces_stay_refused(namespace: str) -> None:
    with pytest.raises(ValueError, match=f"namespace '{namespace}' .* is reserved for PyTorch"):
        _register(f"{namespace}::_custom_op_foo")
