"""The tested range is declared once per place and every place agrees with CI's matrix.

CI (``.ci/run``) runs the default environment (CI's own Python, 3.11) and ``hatch.toml``'s
``oldest`` and ``newest`` legs. The packages' floors (``torch>=``, the ``[triton]`` extra's
``triton>=``), their Python classifiers, and the ranges inside the code that decide which
fast paths an op takes (``opreg_core.TESTED_TORCH``, ``opreg_kernels.TESTED_TRITON``) must be
exactly what those legs run, so that a release bump forgets none of them.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

import opreg_core
import opreg_kernels

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("opreg-core", "opreg-kernels", "opreg-testing")
#: The Python of the default environment: CI's own interpreter.
DEFAULT_PYTHON = "3.11"


def _hatch_env(name: str) -> dict[str, Any]:
    env: dict[str, Any] = tomllib.loads((ROOT / "hatch.toml").read_text())["envs"][name]
    return env


def _pin(env: dict[str, Any], package: str) -> tuple[int, int]:
    """(major, minor) of ``package==X.Y.Z`` in a hatch environment's dependencies."""
    for dependency in env["dependencies"]:
        match = re.fullmatch(rf"{package}==(\d+)\.(\d+)\.\d+", dependency)
        if match:
            return int(match[1]), int(match[2])
    raise AssertionError(f"hatch.toml's environment pins no {package}")


def _floor(requirements: list[str], package: str) -> tuple[int, int]:
    for requirement in requirements:
        match = re.fullmatch(rf"{package}>=(\d+)\.(\d+)", requirement)
        if match:
            return int(match[1]), int(match[2])
    raise AssertionError(f"no {package}>=X.Y among {requirements}")


def _project(package: str) -> dict[str, Any]:
    text = (ROOT / "packages" / package / "pyproject.toml").read_text()
    project: dict[str, Any] = tomllib.loads(text)["project"]
    return project


def test_the_legs_span_the_tested_ranges() -> None:
    oldest, newest = _hatch_env("oldest"), _hatch_env("newest")
    assert (_pin(oldest, "torch"), _pin(newest, "torch")) == opreg_core.TESTED_TORCH
    assert (_pin(oldest, "triton"), _pin(newest, "triton")) == opreg_kernels.TESTED_TRITON


@pytest.mark.parametrize("package", PACKAGES)
def test_torch_floor_is_the_oldest_leg(package: str) -> None:
    floor = _floor(_project(package)["dependencies"], "torch")
    assert floor == _pin(_hatch_env("oldest"), "torch") == opreg_core.TESTED_TORCH[0]


def test_triton_extra_floor_is_the_oldest_leg() -> None:
    extra = _project("opreg-kernels")["optional-dependencies"]["triton"]
    assert _floor(extra, "triton") == opreg_kernels.TESTED_TRITON[0]
    # No ceiling: each torch pins its own Triton, so a cap would refuse a newer torch.
    floor = _dotted(_floor(extra, "triton"))
    assert [r for r in extra if r.startswith("triton")] == [f"triton>={floor}"]


@pytest.mark.parametrize("package", PACKAGES)
def test_python_classifiers_are_the_matrix(package: str) -> None:
    project = _project(package)
    versions = [
        c.rsplit(" :: ", 1)[1]
        for c in project["classifiers"]
        if c.startswith("Programming Language :: Python :: 3.")
    ]
    matrix = {DEFAULT_PYTHON, _hatch_env("oldest")["python"], _hatch_env("newest")["python"]}
    assert versions == sorted(matrix, key=lambda v: tuple(map(int, v.split("."))))
    assert project["requires-python"] == f">={DEFAULT_PYTHON}"


@pytest.mark.parametrize("path", ["README.md", "docs/getting-started.md"])
def test_the_docs_state_the_tested_ranges(path: str) -> None:
    text = " ".join((ROOT / path).read_text().split())
    (t0, t1), (r0, r1) = opreg_core.TESTED_TORCH, opreg_kernels.TESTED_TRITON
    dash = "\N{EN DASH}"  # as prose writes a range
    assert f"torch {t0[0]}.{t0[1]}{dash}{t1[0]}.{t1[1]}" in text
    assert f"Triton {r0[0]}.{r0[1]}{dash}{r1[0]}.{r1[1]}" in text
    assert f"Python 3.11{dash}3.13" in text


def _dotted(release: tuple[int, int]) -> str:
    return f"{release[0]}.{release[1]}"
