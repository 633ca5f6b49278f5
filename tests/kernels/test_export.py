"""torch.export round trip of programs calling opreg ops: ``torch.export.export``, then
``torch.export.save`` here, and ``torch.export.load`` in a fresh process.

One module-scoped export writes a ``.pt2`` per model of ``tests/kernels/export_model.py`` (vmap
inside the exported function, as exported and after ``run_decompositions()``, a Triton op
opaque and compiler-visible, a ``differentiable=False`` op). One fresh process per device then:

1. loads each program before anything registers its ops: ``torch.export.load`` raises a
   ``RuntimeError`` that names nothing ("We ran into an error when deserializing the saved
   file. Please check the warnings above"); the warning it logs just before names the op and
   says to import the module that registers it. Both are asserted, so a torch change to
   either shows here;
2. imports ``export_model`` (the user's package) and loads them again: each runs eagerly
   and under ``torch.compile``, matching the original model, and the Triton kernels and the
   op's ``vmap_fn`` ran in that process (on CPU through Triton's interpreter).

The CUDA variant (compiled Triton kernels) runs on a GPU host: ``benchmarks/gpu/run_gpu.sh
export``. No AOTInductor here (``test_aot_inductor.py``).

torch before 2.13 (2.11 on the GPU host) cannot save a program with vmap inside as exported:
``torch.export.save`` raises ``SerializeError`` on vmap's pre-dispatch nodes
(``torch._functorch.predispatch.lazy_load_decompositions``), for plain torch functions too.
There ``test_*_vmap_program_saves`` skips saying so, and the decomposed program, where vmap is
traced away into the op's batched operator, is what carries vmap through the round trip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from opreg_testing import interpreter_enabled

HERE = Path(__file__).parent

# argv: the folder of the .pt2 files, tests/kernels, the device. Prints one JSON line.
_LOAD = r"""
import faulthandler, json, logging, sys
faulthandler.enable()
import torch
folder, here, device = sys.argv[1:4]
io = torch.load(f"{folder}/io.pt")

class Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.text = []
    def emit(self, record):
        self.text.append(logging.Formatter().format(record))

result = {"before_import": {}, "after_import": {}}
for name in io["names"]:  # 1. nothing registers the ops yet
    records = Records()
    logging.getLogger("torch.export").addHandler(records)
    try:
        torch.export.load(f"{folder}/{name}.pt2")
        error = None
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    logging.getLogger("torch.export").removeHandler(records)
    result["before_import"][name] = {"error": error, "log": "\n".join(records.text)}
result["opreg_before_import"] = sorted(m for m in sys.modules if m.startswith("opreg"))

sys.path.insert(0, here)
import export_model  # 2. the user's package registers the ops
for name in io["names"]:
    x, expected = io["x"].to(device), io["expected"][name]
    before = dict(export_model.CALLS)
    ep = torch.export.load(f"{folder}/{name}.pt2")
    eager = ep.module()(x).cpu()
    calls = {k: v - before.get(k, 0) for k, v in export_model.CALLS.items()}
    compiled = torch.compile(ep.module(), fullgraph=True)(x).cpu()
    result["after_import"][name] = {
        "targets": sorted(str(n.target) for n in ep.graph.nodes if n.op == "call_function"),
        "eager_ok": torch.allclose(eager, expected, atol=1e-5, rtol=1e-5),
        "compiled_ok": torch.allclose(compiled, expected, atol=1e-5, rtol=1e-5),
        "calls": calls,
    }
print(json.dumps(result), flush=True)
"""


@pytest.fixture(scope="module")
def model_module() -> Any:
    sys.path.insert(0, str(HERE))
    try:
        import export_model

        yield export_model
    finally:
        sys.path.remove(str(HERE))


def _vmap_not_saveable(exc: Exception) -> bool:
    """Whether ``torch.export.save`` failed on vmap's pre-dispatch nodes (torch before 2.13)."""
    return type(exc).__name__ == "SerializeError" and "torch._functorch.predispatch" in str(exc)


def _export_all(module: ModuleType, device: str, folder: Path) -> dict[str, str]:
    """Export and save every model of ``export_model`` on ``device`` into ``folder``, with the
    input and the original models' outputs (``io.pt``). Returns the programs this torch cannot
    save, with the reason (only the vmap program as exported, before torch 2.13)."""
    x = torch.randn(4, 5, device=device)
    expected, unsaved = {}, {}
    for name, (model, _, decompose) in module.MODELS.items():
        program = torch.export.export(model(), (x,))
        if decompose:
            program = program.run_decompositions()
        try:
            torch.export.save(program, folder / f"{name}.pt2")
        except Exception as exc:
            if name != "vmap" or not _vmap_not_saveable(exc):
                raise
            unsaved[name] = str(exc).splitlines()[0]
            continue
        expected[name] = model()(x).cpu()
    torch.save({"names": list(expected), "x": x.cpu(), "expected": expected}, folder / "io.pt")
    return unsaved


def _round_trip(module: ModuleType, device: str, folder: Path) -> dict[str, Any]:
    unsaved = _export_all(module, device, folder)
    proc = subprocess.run(
        [sys.executable, "-c", _LOAD, str(folder), str(HERE), device],
        capture_output=True,
        text=True,
        env=dict(os.environ),  # TRITON_INTERPRET=1 on CPU: the Triton kernels run there too
        timeout=570,
    )
    assert proc.returncode == 0, f"the loading process failed:\n{proc.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["unsaved"] = unsaved
    return result


@pytest.fixture(scope="module")
def cpu_round_trip(model_module: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("triton", reason="the round trip runs the Triton ops' kernels")
    if not interpreter_enabled():
        pytest.skip("the CPU round trip runs the Triton kernels through TRITON_INTERPRET=1")
    return _round_trip(model_module, "cpu", tmp_path_factory.mktemp("export_cpu"))


needs_compiled_cuda = pytest.mark.skipif(
    not torch.cuda.is_available() or interpreter_enabled(),
    reason="needs a CUDA device with compiled (not interpreted) Triton kernels",
)


@pytest.fixture(scope="module")
def cuda_round_trip(model_module: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _round_trip(model_module, "cuda", tmp_path_factory.mktemp("export_cuda"))


def _assert_runs_once_imported(result: dict[str, Any], module: ModuleType) -> None:
    runs = result["after_import"]
    assert set(runs) == set(module.MODELS) - set(result["unsaved"])
    for name, run in runs.items():
        ops = module.MODELS[name][1]
        for op in ops:  # the program calls the op itself: export kept it whole
            assert f"{op}.default" in run["targets"], (name, run["targets"])
        assert run["eager_ok"], f"{name}: the loaded program differs from the model"
        assert run["compiled_ok"], f"{name}: torch.compile of the loaded program differs"
    # the loaded programs ran the ops' own code: the batching rule's vmap_fn (twice: vmap and
    # vmap of vmap, one call each) and each Triton launcher in the eager run
    for name in ("vmap", "vmap_decomposed"):
        if name in runs:
            assert runs[name]["calls"].get("centered_vmap") == 2, (name, runs[name]["calls"])
    assert runs["triton_opaque"]["calls"].get("double_opaque") == 1
    assert runs["triton_visible"]["calls"].get("double_visible") == 1


def _assert_clear_error_before_import(result: dict[str, Any], module: ModuleType) -> None:
    assert result["opreg_before_import"] == []  # torch.export.load imports no opreg itself
    assert set(result["before_import"]) == set(module.MODELS) - set(result["unsaved"])
    for name, failed in result["before_import"].items():
        ops = module.MODELS[name][1]
        # what torch raises names nothing (only "see the warnings above") ...
        assert failed["error"] is not None and failed["error"].startswith("RuntimeError: ")
        assert "error when deserializing" in failed["error"]
        # ... the warning it logs right before names the op and says what to do
        assert f"torch.ops.{ops[0]}.default" in failed["log"], failed["log"][-2000:]
        assert "import the custom op to register it" in failed["log"]


def _assert_vmap_program_saved(result: dict[str, Any]) -> None:
    if "vmap" in result["unsaved"]:
        pytest.skip(
            f"torch {torch.__version__} cannot save a program with vmap inside as exported "
            f"({result['unsaved']['vmap']}); the program after run_decompositions() is tested"
        )


def test_cpu_vmap_program_saves(cpu_round_trip: dict[str, Any]) -> None:
    _assert_vmap_program_saved(cpu_round_trip)
    assert "vmap" in cpu_round_trip["after_import"]


def test_cpu_loaded_programs_run_once_the_ops_are_imported(
    cpu_round_trip: dict[str, Any], model_module: ModuleType
) -> None:
    _assert_runs_once_imported(cpu_round_trip, model_module)


def test_cpu_load_without_the_ops_names_them(
    cpu_round_trip: dict[str, Any], model_module: ModuleType
) -> None:
    _assert_clear_error_before_import(cpu_round_trip, model_module)


@needs_compiled_cuda
def test_cuda_vmap_program_saves(cuda_round_trip: dict[str, Any]) -> None:
    _assert_vmap_program_saved(cuda_round_trip)
    assert "vmap" in cuda_round_trip["after_import"]


@needs_compiled_cuda
def test_cuda_loaded_programs_run_once_the_ops_are_imported(
    cuda_round_trip: dict[str, Any], model_module: ModuleType
) -> None:
    _assert_runs_once_imported(cuda_round_trip, model_module)


@needs_compiled_cuda
def test_cuda_load_without_the_ops_names_them(
    cuda_round_trip: dict[str, Any], model_module: ModuleType
) -> None:
    _assert_clear_error_before_import(cuda_round_trip, model_module)
