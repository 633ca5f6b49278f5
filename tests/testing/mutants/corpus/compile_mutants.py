"""Mutants the compile check must catch: ops that are not functions of their inputs, so a
compiled call disagrees with the eager one."""

from __future__ import annotations

import itertools
from typing import Any

import torch

from opreg_testing import OpNamespace

from .spec import Mutant, unary


def _global_rng(ns: OpNamespace) -> Any:
    # Registered as a pure op, but draws from PyTorch's global generator.
    return unary(ns, "draws_global_rng", lambda x: x + torch.rand_like(x))


def _call_counter(ns: OpNamespace) -> Any:
    calls = itertools.count()
    return unary(ns, "counts_calls", lambda x: x * next(calls))


MUTANTS = [
    Mutant(
        "draws_global_rng",
        "compile",
        "a pure op that draws random numbers from the global generator",
        _global_rng,
        {"compile": {"backend": "aot_eager", "vmap": False}},
    ),
    Mutant(
        "counts_calls",
        "compile",
        "an op whose output depends on how often it was called (hidden state)",
        _call_counter,
        {"compile": {"backend": "aot_eager", "vmap": False}},
    ),
]
