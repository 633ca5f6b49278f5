"""The mutation corpus of opreg-testing: deliberately wrong ops that a named check must catch,
and correct ops that no check may flag (issue 10's proof that the checker cannot be fooled).

Loaded by ``tests/testing/mutants/conftest.py`` as the package ``opreg_mutation_corpus``.
"""

from __future__ import annotations

from . import (
    autocast_mutants,
    autograd_mutants,
    compile_mutants,
    correct_ops,
    export_mutants,
    fake_mutants,
    inplace_backward,
    kernel_mutants,
    opcheck_mutants,
    vmap_mutants,
)
from .spec import CorrectOp, Mutant

MUTANTS: list[Mutant] = [
    *vmap_mutants.MUTANTS,
    *fake_mutants.MUTANTS,
    *compile_mutants.MUTANTS,
    *export_mutants.MUTANTS,
    *autograd_mutants.MUTANTS,
    *kernel_mutants.MUTANTS,
    *opcheck_mutants.MUTANTS,
    *inplace_backward.MUTANTS,
    *autocast_mutants.MUTANTS,
]
CORRECT: list[CorrectOp] = [
    *correct_ops.CORRECT,
    *inplace_backward.CORRECT,
    *autocast_mutants.CORRECT,
    *export_mutants.CORRECT,
]

__all__ = ["CORRECT", "MUTANTS", "CorrectOp", "Mutant"]
