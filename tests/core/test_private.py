"""``opreg_core._private``: the one package that touches torch internals.

(Whether its ``INTERNALS`` resolve is checked by ``tests/test_private_boundaries.py``.)"""

from __future__ import annotations

import pytest
import torch

from opreg_core import _private


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
