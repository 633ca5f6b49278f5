"""What import and detection do in a fresh interpreter: no Triton import, no GPU driver,
and the fallbacks with at most one warning or log line when Triton is absent, broken or
disabled. Each case runs in a subprocess (Triton state is per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

_PRELUDE = """
import json, logging, sys, warnings
logging.basicConfig(level=logging.INFO, format="LOG %(name)s %(message)s", stream=sys.stderr)
warnings.simplefilter("always")
"""

# Calls every shipped op with "cpu" as a Triton device type (so the Triton path is taken
# when Triton works) and checks the results against the fallbacks.
_RUN_OPS = """
import torch
import opreg_kernels as ok
after_import = "triton" in sys.modules
for op in (ok.fused_add, ok.philox_uniform, ok.philox_normal):
    ok.triton_kernel_info(op).add_device_type("cpu")
x = torch.arange(6.0)
seeds = torch.tensor([1, 2, 3])
results_ok = (
    torch.equal(ok.fused_add(x, x), x + x)
    and torch.equal(ok.philox_uniform(seeds, 5), ok.philox_uniform.fallback(seeds, 5))
    and bool((ok.philox_normal(seeds, 5) - ok.philox_normal.fallback(seeds, 5)).abs().max() < 4e-6)
    and torch.equal(torch.vmap(ok.fused_add)(x[None], x[None]), (x + x)[None])
)
print(json.dumps({
    "has_triton": ok.has_triton(),
    "has_triton_again": ok.has_triton(),
    "triton_after_import": after_import,
    "triton_imported": "triton" in sys.modules,
    "results_ok": results_ok,
}))
"""


def run_python(
    code: str, env_extra: dict[str, str] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Run ``code`` in a fresh interpreter; returns its JSON line and its stderr lines."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("OPREG_DISABLE_TRITON", "TRITON_INTERPRET")
    }
    env["TRITON_INTERPRET"] = "1"  # "cpu" Triton kernels must run on this CPU-only check
    env.update(env_extra or {})
    proc = subprocess.run(
        [sys.executable, "-c", _PRELUDE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr.splitlines()


def opreg_lines(stderr: list[str]) -> list[str]:
    """stderr lines that opreg_kernels emitted (log records and warnings)."""
    return [line for line in stderr if "opreg_kernels" in line or "OPREG_DISABLE_TRITON" in line]


def test_import_neither_imports_triton_nor_touches_cuda() -> None:
    result, stderr = run_python(
        """
        import torch
        import opreg_kernels
        print(json.dumps({"triton": "triton" in sys.modules, "kernels": any(
            m.endswith(".triton_kernels") for m in sys.modules),
            "cuda_initialized": torch.cuda.is_initialized()}))
        """
    )
    assert result == {"triton": False, "kernels": False, "cuda_initialized": False}
    assert opreg_lines(stderr) == []


def test_cpu_calls_do_not_import_triton() -> None:
    result, _ = run_python(
        """
        import torch, opreg_kernels as ok
        ok.fused_add(torch.ones(3), torch.ones(3)); ok.philox_normal(torch.tensor([1]), 8)
        print(json.dumps({"triton": "triton" in sys.modules}))
        """
    )
    assert result == {"triton": False}


def test_disabled_by_environment_variable() -> None:
    result, stderr = run_python(_RUN_OPS, {"OPREG_DISABLE_TRITON": "1"})
    assert result["has_triton"] is False and result["has_triton_again"] is False
    assert result["triton_imported"] is False  # disabling means not even importing it
    assert result["results_ok"] is True
    lines = opreg_lines(stderr)
    assert len(lines) == 1 and "disabled by OPREG_DISABLE_TRITON" in lines[0], stderr
    assert not any("Warning" in line for line in stderr)


@pytest.mark.parametrize("value", ["0", "", "false"])
def test_falsy_disable_values_leave_triton_on(value: str) -> None:
    result, _ = run_python(
        "import opreg_kernels as ok; print(json.dumps({'on': ok.has_triton()}))",
        {"OPREG_DISABLE_TRITON": value},
    )
    expected = __import__("importlib.util").util.find_spec("triton") is not None
    assert result == {"on": expected}


def test_broken_triton_import_warns_once_and_falls_back(tmp_path: Path) -> None:
    fake = tmp_path / "triton"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise RuntimeError('simulated broken Triton build')\n")
    result, stderr = run_python(
        _RUN_OPS, {"PYTHONPATH": f"{tmp_path}{os.pathsep}" + os.environ.get("PYTHONPATH", "")}
    )
    assert result["has_triton"] is False and result["has_triton_again"] is False
    assert result["triton_after_import"] is False
    assert result["results_ok"] is True
    lines = opreg_lines(stderr)
    assert len(lines) == 1, stderr
    assert "RuntimeWarning" in lines[0] and "simulated broken Triton build" in lines[0]
    assert "opreg: Triton is installed but failed to import" in lines[0]


def test_triton_with_a_missing_dependency_counts_as_broken(tmp_path: Path) -> None:
    fake = tmp_path / "triton"
    fake.mkdir()
    (fake / "__init__.py").write_text("import opreg_no_such_module_for_the_test\n")
    result, stderr = run_python(
        _RUN_OPS, {"PYTHONPATH": f"{tmp_path}{os.pathsep}" + os.environ.get("PYTHONPATH", "")}
    )
    assert result["has_triton"] is False and result["results_ok"] is True
    lines = opreg_lines(stderr)
    assert len(lines) == 1 and "opreg_no_such_module_for_the_test" in lines[0]


def test_absent_triton_logs_one_info_line() -> None:
    # A meta-path hook makes "import triton" fail as if Triton were not installed.
    result, stderr = run_python(
        textwrap.dedent(
            """
        import importlib.abc
        class NoTriton(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "triton" or name.startswith("triton."):
                    raise ModuleNotFoundError("No module named 'triton'", name="triton")
        sys.meta_path.insert(0, NoTriton())
        """
        )
        + _RUN_OPS
    )
    assert result["has_triton"] is False and result["results_ok"] is True
    lines = opreg_lines(stderr)
    assert len(lines) == 1 and "not installed" in lines[0], stderr
    assert not any("Warning" in line for line in stderr)


def test_working_triton_runs_the_interpreted_kernels_silently() -> None:
    if __import__("importlib.util").util.find_spec("triton") is None:
        pytest.skip("Triton is not installed")
    result, stderr = run_python(_RUN_OPS)
    assert result["has_triton"] is True and result["triton_imported"] is True
    assert result["results_ok"] is True
    assert opreg_lines(stderr) == []
