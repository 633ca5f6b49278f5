"""The export check's options, ops registered from ``__main__`` (a script, a notebook) and the
ops it takes besides opreg ops (its mutants and correct ops are in the mutation corpus,
tests/testing/mutants/corpus/export_mutants.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from opreg_core import SampleInput, register_vmap_op, unregister
from opreg_testing import CheckFailure, OpNamespace, check_export, check_op
from opreg_testing.checks.export import FRESH_PROCESS, FROM_MAIN_NOTE


def _samples(device: torch.device) -> list[SampleInput]:
    return [SampleInput((torch.randn(3, 4, device=device),), name="3x4")]


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_a_torch_operator_round_trips() -> None:
    result = check_export(torch.ops.aten.sin.default, samples=_samples(torch.device("cpu")))
    assert result.passed and result.info["vmap_cases"] == 1


def _register_as_in_a_script(ns: OpNamespace, opname: str) -> Any:
    _double.__module__ = "__main__"  # as if defined in a script or notebook
    try:
        return register_vmap_op(
            _double, name=ns.qualname(opname), fake_fn=torch.empty_like, sample_inputs=_samples
        )
    finally:
        _double.__module__ = __name__


def test_an_op_from_main_passes_and_says_what_was_not_checked(
    opreg_namespace: OpNamespace,
) -> None:
    op = _register_as_in_a_script(opreg_namespace, "double")
    result = check_export(op)
    assert result.passed and result.info["vmap_cases"] == 1  # the round trips ran
    assert result.info["not_checked"] == {FRESH_PROCESS: "the op is registered from __main__"}
    assert result.notes == [FROM_MAIN_NOTE]
    assert "not checked: torch.export.load in another process" in FROM_MAIN_NOTE
    assert "register the op in an importable module" in FROM_MAIN_NOTE
    assert "opreg check MODULE" in FROM_MAIN_NOTE
    report = check_op(op, checks="fake,export")
    assert report.ok and report.checked
    assert report.summary() == f"{op.qualname} on cpu: passed fake, export ({FROM_MAIN_NOTE})"


def test_importable_false_switches_the_module_check_off(opreg_namespace: OpNamespace) -> None:
    op = _register_as_in_a_script(opreg_namespace, "double")
    result = check_export(op, vmap=False, importable=False)
    assert result.passed and result.notes == []
    assert result.info == {"vmap_cases": 0, "vmap_decomposed": 0, "module": "__main__"}


_SCRIPT = """
import torch

from opreg_core import SampleInput, register_vmap_op
from opreg_testing import check_op


@register_vmap_op(
    name="opreg_script_{pid}::triple",
    fake_fn=torch.empty_like,
    sample_inputs=lambda device: [SampleInput((torch.randn(3, 4, device=device),))],
)
def triple(x: torch.Tensor) -> torch.Tensor:
    return x * 3


report = check_op(triple, checks="fake,export", device="cpu")
print(report.summary())
print("ok" if report.ok else "FAILED")
"""


def test_a_script_s_op_passes_in_the_script_s_own_process(tmp_path: Path) -> None:
    """A real script (``python script.py``): its op is registered from ``__main__``."""
    script = tmp_path / "prototype.py"
    script.write_text(_SCRIPT.format(pid=os.getpid()))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr
    summary, verdict = done.stdout.strip().splitlines()[-2:]
    assert verdict == "ok"
    name = f"opreg_script_{os.getpid()}::triple"
    assert summary == f"{name} on cpu: passed fake, export ({FROM_MAIN_NOTE})"


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
