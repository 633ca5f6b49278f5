"""The export check's options and the ops it takes besides opreg ops (its mutants and correct
ops are in the mutation corpus, tests/testing/mutants/corpus/export_mutants.py)."""

from __future__ import annotations

import pytest
import torch

from opreg_core import SampleInput, register_vmap_op, unregister
from opreg_testing import CheckFailure, OpNamespace, check_export


def _samples(device: torch.device) -> list[SampleInput]:
    return [SampleInput((torch.randn(3, 4, device=device),), name="3x4")]


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_a_torch_operator_round_trips() -> None:
    result = check_export(torch.ops.aten.sin.default, samples=_samples(torch.device("cpu")))
    assert result.passed and result.info["vmap_cases"] == 1


def test_importable_false_switches_the_module_check_off(opreg_namespace: OpNamespace) -> None:
    _double.__module__ = "__main__"  # as if defined in a script
    try:
        op = register_vmap_op(
            _double, name=opreg_namespace.qualname("double"), fake_fn=torch.empty_like,
            sample_inputs=_samples,
        )  # fmt: skip
    finally:
        _double.__module__ = __name__
    with pytest.raises(CheckFailure, match="registered from __main__"):
        check_export(op, vmap=False)
    result = check_export(op, vmap=False, importable=False)
    assert result.passed and result.info == {"vmap_cases": 0, "vmap_decomposed": 0,
                                             "module": "__main__"}  # fmt: skip


def test_bad_options_are_refused() -> None:
    with pytest.raises(TypeError, match="accepts: vmap, importable"):
        check_export(torch.ops.aten.sin.default, samples=[], nested=False)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="the export check's vmap must be True or False"):
        check_export(torch.ops.aten.sin.default, samples=[], vmap="no")  # type: ignore[arg-type]


def test_a_failed_load_names_the_op(
    opreg_namespace: OpNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch.export.load's own error names nothing ("see the warnings above"); the check's
    failure adds the line of the logged warning that names the op."""

    def triple(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    op = register_vmap_op(
        triple, name=opreg_namespace.qualname("gone"), fake_fn=torch.empty_like,
        sample_inputs=_samples,
    )  # fmt: skip
    load = torch.export.load

    def load_after_unregistering(*args: object, **kwargs: object) -> object:
        unregister(op.qualname)  # as in a process that did not import the op's module
        return load(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(torch.export, "load", load_after_unregistering)
    with pytest.raises(CheckFailure) as failure:
        check_export(op, vmap=False)
    message = str(failure.value)
    assert "torch.export.load raised RuntimeError" in message
    assert f"failed to resolve torch.ops.{opreg_namespace}.gone.default" in message
