"""``opreg check`` says which of opreg's fast paths the run took, and why.

The paths come from ``opreg_core.fast_paths()`` and ``opreg_kernels.fast_paths()``; on a torch
outside ``opreg_core.TESTED_TORCH`` the report must say the public route ran.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import opreg_core
import opreg_kernels
from opreg_testing import OpNamespace
from opreg_testing import paths as paths_module
from opreg_testing.cli import main

MODULE = """
import torch
from torch import Tensor

from opreg_core import SampleInput, register_vmap_op


def double(x: Tensor) -> Tensor:
    return 2 * x


register_vmap_op(
    double,
    name="{ns}::double",
    fake_fn=torch.empty_like,
    sample_inputs=lambda device: [SampleInput((torch.randn(2, 3, device=device),))],
)
"""


@pytest.fixture
def ops_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opreg_namespace: OpNamespace
) -> Iterator[str]:
    name = f"paths_ops_{opreg_namespace.name}"
    (tmp_path / f"{name}.py").write_text(MODULE.format(ns=opreg_namespace.name))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_every_fast_path_of_both_packages_is_listed() -> None:
    names = [p.name for p in paths_module.fast_paths()]
    expected = [p.name for p in opreg_core.fast_paths() + opreg_kernels.fast_paths()]
    assert names == expected
    assert "direct call" in names and "fast CUDA launch" in names


def test_the_text_report_lists_versions_and_paths(
    ops_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", ops_module, "--checks", "fake", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert f"Fast paths on torch {torch.__version__}" in out
    for path in opreg_core.fast_paths():
        state = "on" if path.taken else "off"
        assert f"  {path.name}: {state} ({path.reason})" in out
    # The summary stays the last line.
    assert out.splitlines()[-1].startswith("1 passed")


def test_the_json_report_lists_paths(ops_module: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", ops_module, "--checks", "fake", "--json", "-q", "--device", "cpu"]) == 0
    data = json.loads(capsys.readouterr().out)
    core = {p["name"]: p for p in data["fast_paths"]}
    assert core["direct call"]["taken"] is opreg_core.fast_paths()[0].taken
    assert set(core["direct call"]) == {"name", "taken", "reason"}


def test_an_untested_torch_is_reported_on_the_public_route(
    ops_module: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from opreg_core import _versions

    monkeypatch.setattr(_versions, "TORCH_TESTED", False)
    monkeypatch.setattr(_versions, "TORCH_VERSION", "9.0.0")
    assert main(["check", ops_module, "--checks", "fake", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "  direct call: off (torch 9.0.0 is untested (tested: " in out
    assert "the dispatcher's route" in out


def test_the_pytest_header_names_the_paths_that_are_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from opreg_core import _versions

    monkeypatch.setattr(_versions, "TORCH_TESTED", False)
    monkeypatch.setattr(_versions, "TORCH_VERSION", "9.0.0")
    line = paths_module.paths_summary()
    assert line.startswith("fast paths off: direct call (torch 9.0.0 is untested (tested: ")
    for path in opreg_core.fast_paths():
        assert f"{path.name} (" in line or f"{path.name}, " in line


def test_the_pytest_header_line_when_every_path_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from opreg_core import FastPath

    monkeypatch.setattr(paths_module, "fast_paths", lambda: [FastPath("a", True, "why")])
    assert paths_module.paths_summary() == "every fast path on"
    both = [FastPath("a", False, "r"), FastPath("b", False, "r"), FastPath("c", False, "s")]
    monkeypatch.setattr(paths_module, "fast_paths", lambda: both)
    assert paths_module.paths_summary() == "fast paths off: a, b (r); c (s)"
