"""Mutants the opcheck check must catch: ops whose schema hides what they do to their inputs."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from opreg_testing import OpNamespace

from .spec import Mutant, unary


def _bump(x: Tensor) -> Tensor:
    x.add_(1)  # writes to x, but mutates_args does not say so
    return x * 2


def _undeclared_mutation(ns: OpNamespace) -> Any:
    return unary(ns, "undeclared_mutation", _bump)


def _alias(ns: OpNamespace) -> Any:
    return unary(ns, "output_aliases_input", lambda x: x)


def _view(ns: OpNamespace) -> Any:
    return unary(ns, "output_is_a_view", lambda x: x.view(-1)[: x.numel()].view(x.shape))


def _second_output_aliases(ns: OpNamespace) -> Any:
    return unary(
        ns,
        "second_output_aliases_input",
        lambda x: (x * 2, x),
        fake_fn=lambda x: (torch.empty_like(x), torch.empty_like(x)),
        schema="(Tensor x) -> (Tensor, Tensor)",
    )


_SCHEMA = {"opcheck": {"test_utils": ["test_schema"]}}

MUTANTS = [
    Mutant(
        "undeclared_mutation",
        "opcheck",
        "the op adds 1 to its input in place without declaring mutates_args",
        _undeclared_mutation,
    ),
    Mutant("output_aliases_input", "opcheck", "the op returns its input itself", _alias),
    Mutant("output_is_a_view", "opcheck", "the op returns a view of its input", _view),
    Mutant(
        "second_output_aliases_input",
        "opcheck",
        "the second of two outputs is the input itself",
        _second_output_aliases,
    ),
]
