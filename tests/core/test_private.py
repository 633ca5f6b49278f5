"""``opreg_core._private``: the check that names the torch internals a torch build lacks."""

from __future__ import annotations

import pytest
import torch

from opreg_core import _private


def test_every_listed_internal_resolves_in_this_torch() -> None:
    assert _private.missing_internals() == []


@pytest.mark.parametrize(
    "name",
    [
        "torch._C._no_such_internal",
        "torch._ops.OpOverload._no_such_attribute",
        "torch._no_such_module.thing",
    ],
)
def test_a_missing_internal_is_named(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setattr(_private, "INTERNALS", (*_private.INTERNALS, name))
    assert _private.missing_internals() == [name]


def test_an_instance_attribute_counts_when_init_sets_it() -> None:
    """``OpOverload._op`` exists only on instances; ``__init__`` assigns it."""
    assert not hasattr(_private.OpOverload, "_op")
    assert _private._resolves("torch._ops.OpOverload._op")
    assert not _private._resolves("torch._ops.OpOverload._never_assigned")


@pytest.mark.parametrize("randomness", ["error", "same", "different"])
def test_vmap_randomness_is_the_innermost_levels(randomness: str) -> None:
    seen: list[tuple[str, str]] = []

    def inner(x: torch.Tensor) -> torch.Tensor:
        seen.append(("inner", _private.vmap_randomness()))
        return x

    def outer(x: torch.Tensor) -> torch.Tensor:
        seen.append(("outer", _private.vmap_randomness()))
        return torch.vmap(inner, randomness=randomness)(x)

    other = "same" if randomness != "same" else "different"
    torch.vmap(outer, randomness=other)(torch.zeros(2, 3))
    assert seen == [("outer", other), ("inner", randomness)]
