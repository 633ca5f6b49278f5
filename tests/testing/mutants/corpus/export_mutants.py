"""Mutants the export check must catch: ops that another process cannot register to load a
saved program, and ops whose loaded program disagrees with eager, also when registered from
``__main__``; and correct ops: the right version of the last one, and an op registered from
``__main__`` (a script or notebook), which passes with a note that the fresh-process part
was not checked.

Every argument type opreg accepts is serialised by ``torch.export.save`` (torch 2.13: Scalar,
complex, str, ScalarType, Device, Layout, MemoryFormat, lists, defaults), and opreg refuses the
ones torch.compile cannot pass (Generator), so no mutant has an unserialisable argument. A
fake that predicts the output wrongly is the fake check's: export traces with the same fake.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from opreg_core import SampleInput, register_vmap_op
from opreg_testing import OpNamespace

from .spec import CorrectOp, Mutant, randn, unary

_NO_VMAP = {"export": {"vmap": False}}


def _in_main(fn: Any) -> Any:
    """``fn`` as if defined in a script or notebook (the module the export check reads)."""
    fn.__module__ = "__main__"
    return fn


def _from_main(ns: OpNamespace) -> Any:
    # Defined in a script or notebook: another process's __main__ is another program, so
    # that part cannot be checked here; the op itself is right.
    def double(x: Tensor) -> Tensor:
        return x * 2

    return unary(ns, "from_main", _in_main(double))


def _from_main_counts_calls(ns: OpNamespace) -> Any:
    # Prototyped in a notebook, and wrong: its loaded program differs from eager.
    calls = itertools.count(1)

    def scale(x: Tensor) -> Tensor:
        return x * next(calls)

    return unary(ns, "from_main_counts_calls", _in_main(scale))


def _from_unimportable_module(ns: OpNamespace) -> Any:
    # Generated code (exec) under a module name nothing can import.
    namespace: dict[str, Any] = {"__name__": "opreg_generated_kernels", "torch": torch}
    exec("def double(x):\n    return x * 2\n", namespace)
    double = namespace["double"]
    double.__annotations__ = {"x": Tensor, "return": Tensor}
    return unary(ns, "from_unimportable_module", double)


def _counts_calls(ns: OpNamespace) -> Any:
    calls = itertools.count(1)
    return unary(ns, "export_counts_calls", lambda x: x * next(calls))


_SUM = "sum"


def _mode_samples(device: torch.device) -> Iterator[SampleInput]:
    yield SampleInput((randn(3, 4, seed=11).to(device), _SUM), name="3x4 sum")
    yield SampleInput((randn(2, 5, seed=12).to(device), "mean"), name="2x5 mean")


def _reduce(ns: OpNamespace, opname: str, by_identity: bool) -> Any:
    def reduce_rows(x: Tensor, mode: str) -> Tensor:
        # `mode is _SUM` holds for the caller's interned literal only; a loaded program passes
        # the string it deserialised, an equal but other object.
        summing = mode is _SUM if by_identity else mode == _SUM
        return x.sum(-1) if summing else x.mean(-1)

    return register_vmap_op(
        reduce_rows,
        name=ns.qualname(opname),
        fake_fn=lambda x, mode: x.new_empty(x.shape[:-1]),
        sample_inputs=_mode_samples,
    )


MUTANTS = [
    Mutant(
        "registered_from_unimportable_module",
        "export",
        "an op registered from generated code whose module name nothing can import",
        _from_unimportable_module,
        _NO_VMAP,
    ),
    Mutant(
        "export_counts_calls",
        "export",
        "an op whose output depends on how often it was called: the loaded program differs",
        _counts_calls,
        _NO_VMAP,
    ),
    Mutant(
        "from_main_export_counts_calls",
        "export",
        "registered from __main__ (a notebook), and its output depends on how often it was "
        "called: the loaded program differs",
        _from_main_counts_calls,
        _NO_VMAP,
    ),
    Mutant(
        "str_compared_by_identity",
        "export",
        "compares a str argument with `is`: the deserialised string of a loaded program fails",
        lambda ns: _reduce(ns, "mode_by_identity", by_identity=True),
        _NO_VMAP,
    ),
]

CORRECT = [
    CorrectOp(
        "registered_from_main",
        "a right op registered from __main__ (a script or notebook): passes, noting that a "
        "fresh process was not checked",
        _from_main,
    ),
    CorrectOp(
        "str_compared_by_value",
        "a str argument compared with ==",
        lambda ns: _reduce(ns, "mode_by_value", by_identity=False),
    ),
]
