"""AOTInductor packages of models that call opreg ops (``tests/kernels/aoti_model.py``).

``torch.export.export`` keeps every opreg op whole; ``torch._inductor.aoti_compile_and_package``
(torch's documented AOTInductor entry point) compiles the program into a ``.pt2`` package, and
``torch._inductor.aoti_load_package`` runs it. Each package runs in a fresh process:

- opaque ops (any op on CPU; on CUDA a plain opreg op or a Triton op with
  ``compiler_visible=False``): the package calls them by name, so the process must import the
  module that registers them; without it loading fails naming the op. For ops of
  ``register_vmap_op`` (plain-torch bodies) that module needs opreg-core alone: the CPU package
  of ``aoti_core_ops.CoreModel`` runs in a process where opreg-kernels and opreg-testing
  cannot be imported. With none of opreg importable it does not load (the op is unknown to the
  dispatcher);
- compiler-visible Triton ops on CUDA: the package holds their kernels, and runs in a process
  that cannot import opreg at all.

The CPU package takes a C++ compiler and about half a minute (marked ``slow``); the CUDA tests
need a GPU (``benchmarks/gpu/verify_visible.sh`` runs them on the H200).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

HERE = Path(__file__).parent

# Runs a package in a fresh process: argv = package, inputs/outputs file, "import" (import
# aoti_model first), "core" (refuse every import of opreg but opreg_core, import aoti_core_ops
# first) or "block" (refuse every import of opreg), tests/kernels, device.
_RUN = r"""
import faulthandler, importlib.abc, json, sys
faulthandler.enable()  # a crash prints the Python stack to stderr
import torch
package, io_path, how, here, device = sys.argv[1:6]
blocked = {"import": (), "core": ("opreg_kernels", "opreg_testing")}.get(
    how, ("opreg_core", "opreg_kernels", "opreg_testing"))
class NoOpreg(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ImportError(f"this process must not import {name}")
        return None
sys.meta_path.insert(0, NoOpreg())
sys.path.insert(0, here)
if how == "import":
    import aoti_model  # registers the user's ops (and imports opreg)
elif how == "core":
    import aoti_core_ops  # registers the user's plain ops with opreg_core alone
io = torch.load(io_path)
x, y = io["x"].to(device), io["y"].to(device)  # initialises CUDA before the package loads
try:
    runner = torch._inductor.aoti_load_package(package)
    print("stage: loaded", file=sys.stderr, flush=True)
    out = runner(x, y)
    out = out[0] if isinstance(out, (list, tuple)) else out
    io["got"] = out.cpu()
    print("stage: ran", file=sys.stderr, flush=True)
    torch.save(io, io_path)
    error = None
except Exception as exc:
    error = f"{type(exc).__name__}: {exc}"
print(json.dumps({
    "error": error,
    "opreg_modules": sorted(m for m in sys.modules if m.startswith("opreg")),
}), flush=True)
"""


@pytest.fixture(scope="module")
def model_module() -> Iterator[ModuleType]:
    """aoti_model, with tests/kernels importable while the module's tests run (its Triton
    launchers are named "visible_kernels:launch", imported on their first launch)."""
    sys.path.insert(0, str(HERE))
    try:
        import aoti_model

        yield aoti_model
    finally:
        sys.path.remove(str(HERE))


def _package(
    model: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    path: Path,
    op: str = "opreg.fused_add.default",
) -> Path:
    program = torch.export.export(model, inputs)
    targets = {str(node.target) for node in program.graph.nodes}
    assert op in targets  # export keeps the op, visible or not
    return Path(torch._inductor.aoti_compile_and_package(program, package_path=str(path)))


def _run_fresh(package: Path, inputs: tuple[torch.Tensor, ...], how: str) -> dict[str, Any]:
    io_path = package.with_suffix(".io.pt")
    x, y = inputs
    device = str(x.device)
    torch.save({"x": x.cpu(), "y": y.cpu()}, io_path)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, str(package), str(io_path), how, str(HERE), device],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    lines = proc.stdout.strip().splitlines()
    assert lines, f"the package process died (rc={proc.returncode}):\n{proc.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    assert proc.returncode == 0, (
        f"the package process finished (error: {result['error']}) but exited with "
        f"rc={proc.returncode}:\n{proc.stderr[-4000:]}"
    )
    if result["error"] is None:
        result["got"] = torch.load(io_path)["got"]
    return result


def _inputs(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(1000, device=device), torch.randn(1000, device=device)


class _PlainModel(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x * 2 + y) * 3


_control_results: dict[str, str | None] = {}


def _require_loadable_packages(device: str, tmp_path: Path) -> None:
    """The control: a package of plain torch (no opreg op) through the same fresh-process runner.

    If it cannot run either, this torch build (or host) cannot load AOTInductor packages at all
    and the opreg cases are skipped saying so; seen on torch 2.11.0+cu130 on the H200 host,
    where ``aoti_load_package`` crashes (SIGSEGV) for any package, CPU or CUDA.
    """
    if device not in _control_results:
        inputs = _inputs(device)
        program = torch.export.export(_PlainModel(), inputs)
        package = torch._inductor.aoti_compile_and_package(
            program, package_path=str(tmp_path / f"plain_{device}.pt2")
        )
        try:
            result = _run_fresh(Path(package), inputs, "block")
            torch.testing.assert_close(result["got"], _PlainModel()(*inputs).cpu())
            _control_results[device] = None
        except AssertionError as exc:
            _control_results[device] = str(exc).splitlines()[0]
    problem = _control_results[device]
    if problem is not None:
        pytest.skip(
            f"AOTInductor packages do not run on this torch build ({torch.__version__}): a "
            f"plain-torch package without any opreg op fails too ({problem})"
        )


@pytest.fixture(scope="module")
def cpu_package(model_module: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("AOTInductor on CPU needs a C++ compiler")
    _require_loadable_packages("cpu", tmp_path_factory.mktemp("aoti_control"))
    path = tmp_path_factory.mktemp("aoti") / "core_cpu.pt2"
    core_model = model_module.CoreModel()
    return _package(core_model, _inputs("cpu"), path, "opreg_aoti.soft_clip.default")


@pytest.mark.slow
def test_cpu_package_runs_with_only_opreg_core(cpu_package: Path, model_module: ModuleType) -> None:
    """The process imports the user's module of plain ops; opreg-kernels and opreg-testing
    cannot be imported there (as where opreg-core alone is installed)."""
    inputs = _inputs("cpu")
    result = _run_fresh(cpu_package, inputs, "core")
    assert result["error"] is None, result["error"]
    assert {m.split(".")[0] for m in result["opreg_modules"]} == {"opreg_core"}
    torch.testing.assert_close(result["got"], model_module.CoreModel()(*inputs))


@pytest.mark.slow
def test_cpu_package_without_opreg_names_the_missing_op(cpu_package: Path) -> None:
    """With no opreg importable the ops are unknown: loading fails naming one of them."""
    result = _run_fresh(cpu_package, _inputs("cpu"), "block")
    assert result["error"] is not None and "opreg_aoti::soft_clip" in result["error"]
    assert result["opreg_modules"] == []


needs_compiled_cuda = pytest.mark.skipif(
    not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"),
    reason="needs a CUDA device with compiled (not interpreted) Triton kernels",
)


@needs_compiled_cuda
def test_cuda_visible_package_runs_without_opreg(model_module: ModuleType, tmp_path: Path) -> None:
    _require_loadable_packages("cuda", tmp_path)
    inputs = _inputs("cuda")
    package = _package(model_module.VisibleModel(), inputs, tmp_path / "visible.pt2")
    result = _run_fresh(package, inputs, "block")
    assert result["error"] is None, result["error"]
    assert result["opreg_modules"] == []
    torch.testing.assert_close(result["got"], model_module.VisibleModel()(*inputs).cpu())


@needs_compiled_cuda
def test_cuda_opaque_package_runs_where_the_ops_are_imported(
    model_module: ModuleType, tmp_path: Path
) -> None:
    _require_loadable_packages("cuda", tmp_path)
    inputs = _inputs("cuda")
    package = _package(model_module.OpaqueModel(), inputs, tmp_path / "opaque.pt2")
    result = _run_fresh(package, inputs, "import")
    assert result["error"] is None, result["error"]
    torch.testing.assert_close(result["got"], model_module.OpaqueModel()(*inputs).cpu())
    blocked = _run_fresh(package, inputs, "block")
    assert blocked["error"] is not None and "opreg_aoti::" in blocked["error"]
