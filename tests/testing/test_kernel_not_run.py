"""A Triton op whose Triton kernel ran on no device is not green (issue 20, findings 1 and 2).

``opreg check`` and the pytest plugin check the same default devices (cpu, cuda when present,
triton-cpu where Triton kernels can run on CPU), run an op without a Triton kernel once (not
again on triton-cpu), and fail a run in which a Triton op's kernel never ran, naming the op,
the kernel and the reason (Triton failing to import, its interpreter off, Triton disabled).

Every run is a fresh process: ``TRITON_INTERPRET`` is decided at start-up. "numpy missing"
(the README's install once gave Triton without it) is a folder on ``PYTHONPATH`` whose
``numpy`` raises ``ModuleNotFoundError``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.needs_triton,
    # With CUDA the default devices are cpu and cuda (the kernels run on the GPU).
    pytest.mark.skipif(torch.cuda.is_available(), reason="the default devices differ on CUDA"),
]
pytest.importorskip("opreg_kernels")

OPS = """
import torch
from torch import Tensor

from opreg_core import SampleInput, register_vmap_op
from opreg_kernels import register_triton_op


def samples(device):
    yield SampleInput((torch.randn(3, 5, device=device),), name="3x5")


def fake(x):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def ok_kernel(x: Tensor) -> Tensor:
    return (2 * x).contiguous()


def bad_kernel(x: Tensor) -> Tensor:
    return (2 * x).contiguous()


def ok_pure(x: Tensor) -> Tensor:
    return (2 * x).contiguous()


register_triton_op(ok_kernel, name="tnr::ok_kernel", fake_fn=fake,
                   triton_fn="tnr_kernels:launch", sample_inputs=samples)
register_triton_op(bad_kernel, name="tnr::bad_kernel", fake_fn=fake,
                   triton_fn="tnr_kernels:launch_plus_one", sample_inputs=samples)
register_vmap_op(ok_pure, name="tnr::ok_pure", fake_fn=fake, sample_inputs=samples)
"""

KERNELS = """
import torch
import triton
import triton.language as tl


@triton.jit
def _double(x_ptr, out_ptr, n, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2 + SHIFT, mask=mask)


def _run(x, shift):
    x = x.contiguous()
    out = torch.empty_like(x)
    _double[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), SHIFT=shift, BLOCK=64)
    return out


def launch(x):
    return _run(x, 0.0)


def launch_plus_one(x):  # the mutant: differs from the fallback
    return _run(x, 1.0)
"""

PLUGIN_TESTS = """
import pytest

from opreg_testing import parametrize_ops


def test_devices(opreg_devices):
    print("DEVICES", ",".join(opreg_devices))


@parametrize_ops("tnr")
@pytest.mark.parametrize("check", ["fake", "kernel"])
def test_op(op, check, opreg_device, opreg_check):
    opreg_check(op, check)
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder: Path = tmp_path_factory.mktemp("kernel_not_run")
    (folder / "tnr.py").write_text(textwrap.dedent(OPS))
    (folder / "tnr_kernels.py").write_text(textwrap.dedent(KERNELS))
    (folder / "test_tnr.py").write_text(textwrap.dedent(PLUGIN_TESTS))
    (folder / "pytest.ini").write_text(
        "[pytest]\nopreg_triton_interpret = auto\nopreg_compile_backend = aot_eager\n"
    )
    blocker = folder / "no_numpy"
    blocker.mkdir()
    (blocker / "numpy.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'numpy'\", name='numpy')\n"
    )
    return folder


def _env(project: Path, *, numpy: bool = True, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PYTEST_ADDOPTS")}
    paths = [] if numpy else [str(project / "no_numpy")]
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def opreg_check(
    project: Path, *args: str, numpy: bool = True, env: dict[str, str] | None = None
) -> tuple[int, Any]:
    """``opreg check tnr ... --json``: the exit status and the report."""
    command = [sys.executable, "-m", "opreg_testing.cli", "check", "tnr", "--json", "-q"]
    done = subprocess.run(
        [*command, "--checks", "fake,kernel", *args],
        cwd=project,
        env=_env(project, numpy=numpy, **(env or {})),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode == 2:
        return 2, done.stderr
    assert done.stdout.startswith("{"), done.stdout[-2000:] + done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)


def run_pytest(project: Path, *args: str, numpy: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "-s", *args],
        cwd=project,
        env=_env(project, numpy=numpy),
        capture_output=True,
        text=True,
        check=False,
    )


def _rows(data: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["op"], r["device"]): {x["check"]: x for x in r["results"]} for r in data["reports"]}


def test_the_kernel_runs_on_triton_cpu_by_default_and_pure_ops_run_once(project: Path) -> None:
    code, data = opreg_check(project, "-k", "ok_")
    assert code == 0, data
    assert data["devices"] == ["cpu", "triton-cpu"] and data["kernels_not_run"] == []
    rows = _rows(data)
    # The pure op runs on cpu only: triton-cpu would run the same code again.
    assert sorted(rows) == [
        ("tnr::ok_kernel", "cpu"),
        ("tnr::ok_kernel", "triton-cpu"),
        ("tnr::ok_pure", "cpu"),
    ]
    kernel = rows[("tnr::ok_kernel", "triton-cpu")]["kernel"]
    assert kernel["status"] == "passed" and kernel["info"]["kernel"] == "triton"


def test_a_wrong_kernel_is_caught_so_the_kernel_ran(project: Path) -> None:
    code, data = opreg_check(project, "-k", "bad_kernel")
    assert code == 1
    rows = _rows(data)
    assert rows[("tnr::bad_kernel", "cpu")]["kernel"]["status"] == "skipped"
    failed = rows[("tnr::bad_kernel", "triton-cpu")]["kernel"]
    assert failed["status"] == "failed"
    assert "the kernel differs from the fallback" in failed["message"]


def test_a_triton_that_fails_to_import_is_not_green(project: Path) -> None:
    code, data = opreg_check(project, "-k", "ok_", numpy=False)
    assert code == 1 and data["ok"] is False
    assert data["devices"] == ["cpu"]  # triton-cpu cannot run here: not a default device
    assert [(k["op"], k["kernel"]) for k in data["kernels_not_run"]] == [
        ("tnr::ok_kernel", "tnr_kernels:launch")
    ]
    assert data["kernels_not_run"][0]["message"] == (
        "tnr::ok_kernel: its Triton kernel (tnr_kernels:launch) ran on no device in this run, "
        "so only its PyTorch fallback was checked: Triton is installed but fails to import "
        "(ModuleNotFoundError: No module named 'numpy'); install numpy (pip install "
        "'opreg-kernels[triton]' brings what Triton's interpreter needs)"
    )
    assert data["counts"]["failed"] == 0  # every check that ran passed: still not green
    code, data = opreg_check(project, "-k", "ok_", "--allow-unchecked", numpy=False)
    assert code == 0 and len(data["kernels_not_run"]) == 1


def test_the_table_names_the_op_and_warns_about_triton(project: Path) -> None:
    command = [sys.executable, "-m", "opreg_testing.cli", "check", "tnr", "-k", "ok_"]
    done = subprocess.run(
        [*command, "--checks", "fake", "-q"],
        cwd=project,
        env=_env(project, numpy=False),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "\nNot checked (a failure):\n  tnr::ok_kernel: its Triton kernel" in done.stdout
    assert (
        done.stdout.rstrip()
        .splitlines()[-1]
        .startswith("2 passed, 0 failed, 0 skipped (2 ops), 1 Triton kernel(s) not run in ")
    )


def test_an_explicit_triton_cpu_that_cannot_run_is_a_usage_error(project: Path) -> None:
    code, err = opreg_check(project, "--device", "triton-cpu", numpy=False)
    assert code == 2
    assert err.splitlines()[-1].startswith(
        "opreg check: error: device 'triton-cpu' cannot run here: Triton is installed but "
        "fails to import (ModuleNotFoundError: No module named 'numpy')"
    )


@pytest.mark.parametrize(
    ("args", "env", "reason"),
    [
        (
            ("--triton-interpret", "off"),
            {},
            "no CUDA device is present, and Triton's interpreter is off (TRITON_INTERPRET=1 "
            "was not set at start-up): opreg check --triton-interpret on, or "
            "--opreg-triton-interpret=on under pytest",
        ),
        ((), {"OPREG_DISABLE_TRITON": "1"}, "Triton is disabled by OPREG_DISABLE_TRITON=1"),
        (
            ("--device", "cpu"),
            {},
            "the devices of this run (cpu) do not include triton-cpu, where it runs on CPU: "
            "add it (--device triton-cpu, or --opreg-device=triton-cpu under pytest)",
        ),
    ],
    ids=["interpreter-off", "disabled", "cpu-only"],
)
def test_each_reason_is_named(
    project: Path, args: tuple[str, ...], env: dict[str, str], reason: str
) -> None:
    code, data = opreg_check(project, "-k", "ok_kernel", *args, env=env)
    assert code == 1
    assert [k["reason"] for k in data["kernels_not_run"]] == [reason]


def _plugin_devices(output: str) -> str:
    found = re.search(r"DEVICES (\S+)", output)
    assert found is not None, output[-3000:]
    return found.group(1)


@pytest.mark.parametrize("numpy", [True, False], ids=["interpreter", "numpy-missing"])
def test_the_plugin_checks_the_same_devices_as_opreg_check(project: Path, numpy: bool) -> None:
    _, data = opreg_check(project, "-k", "ok_", numpy=numpy)
    done = run_pytest(project, "-k", "devices", numpy=numpy)
    assert _plugin_devices(done.stdout) == ",".join(data["devices"]), done.stdout


def test_the_plugin_runs_the_kernel_on_triton_cpu_and_labels_skips(project: Path) -> None:
    done = run_pytest(project, "-k", "ok_")
    assert done.returncode == 0, done.stdout[-3000:]
    out = done.stdout
    assert "opreg: devices cpu, triton-cpu; Triton interpreter on" in out
    assert (
        "tnr::ok_pure on triton-cpu: the op has no Triton kernel, so triton-cpu runs what cpu "
        "runs: it is checked on cpu" in out
    )
    assert "tnr::ok_kernel on cpu: kernel: no kernel registered for device type 'cpu'" in out
    assert "Triton kernels not run" not in out
    # 2 ops x 2 checks x 2 devices: kernel on cpu skips for both, the pure op on triton-cpu.
    assert "4 passed, 4 skipped" in out


def test_the_plugin_catches_a_wrong_kernel_on_triton_cpu(project: Path) -> None:
    done = run_pytest(project, "-k", "bad_kernel and kernel")
    assert done.returncode == 1
    assert "1 failed, 2 passed, 1 skipped" in done.stdout  # the fake checks pass
    assert "opreg kernel check failed for tnr::bad_kernel" in done.stdout


def test_the_plugin_fails_a_run_whose_triton_kernel_never_ran(project: Path) -> None:
    done = run_pytest(project, "-k", "ok_", numpy=False)
    assert done.returncode == 1, done.stdout[-3000:]
    out = done.stdout
    assert "opreg: devices cpu; Triton interpreter on" in out
    assert "2 passed, 2 skipped" in out  # every test that ran passed: the run still fails
    assert "opreg: Triton kernels not run (a failure: the run exits 1;" in out
    assert (
        "tnr::ok_kernel: its Triton kernel (tnr_kernels:launch) ran on no device in this run, "
        "so only its PyTorch fallback was checked: Triton is installed but fails to import "
        "(ModuleNotFoundError: No module named 'numpy')" in out
    )
    off = run_pytest(project, "-k", "ok_", "--opreg-triton-interpret=off")
    assert off.returncode == 1
    assert "Triton's interpreter is off" in off.stdout
