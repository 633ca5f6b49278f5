"""``opreg check MODULE``: the table, the JSON report, progress, exit status and usage errors."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from opreg_testing import OpNamespace
from opreg_testing.cli import main

MODULE = """
import torch
from torch import Tensor

from opreg_core import SampleInput, register_vmap_op


def samples(device):
    yield SampleInput((torch.randn(2, 3, device=device),), name="2x3")


def good(x: Tensor) -> Tensor:
    return 2 * x


def bad_fake(x: Tensor) -> Tensor:
    return 2 * x


def no_samples(x: Tensor) -> Tensor:
    return 2 * x


register_vmap_op(good, name="{ns}::good", fake_fn=torch.empty_like, sample_inputs=samples)
register_vmap_op(
    bad_fake, name="{ns}::bad_fake", fake_fn=lambda x: x.new_empty(1), sample_inputs=samples
)
register_vmap_op(no_samples, name="{ns}::no_samples", fake_fn=torch.empty_like)
"""


@pytest.fixture
def ops_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opreg_namespace: OpNamespace
) -> Iterator[tuple[str, str]]:
    """A module registering a good op, an op with a wrong fake and one without samples."""
    name = f"cli_ops_{opreg_namespace.name}"
    (tmp_path / f"{name}.py").write_text(MODULE.format(ns=opreg_namespace.name))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, opreg_namespace.name
    sys.modules.pop(name, None)


def test_table_progress_details_and_exit_status(
    ops_module: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    module, ns = ops_module
    assert main(["check", module, "--checks", "fake,vmap", "--device", "cpu"]) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].split() == ["op", "device", "fake", "vmap"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:5]}
    assert rows[f"{ns}::good"][:2] == ["cpu", "pass"] and rows[f"{ns}::good"][3] == "pass"
    assert rows[f"{ns}::bad_fake"][1] == "FAIL"
    assert rows[f"{ns}::no_samples"] == ["cpu", "skip", "skip"]
    assert f"Failures:\ncpu: opreg fake check failed for {ns}::bad_fake\n  sample: '2x3'" in out
    assert f"  {ns}::no_samples [cpu] fake: the op has no sample_inputs to check it with" in out
    assert f"  {ns}::good [cpu]: PyTorch per-sample fallback (" in out
    assert "\n3 passed, 1 failed, 2 skipped (3 ops) in " in out
    assert err.splitlines()[0].startswith(f"[1/6] {ns}::good fake: pass ")
    assert len(err.splitlines()) == 6


def test_json_report(ops_module: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    module, ns = ops_module
    assert main(["check", module, "--checks", "fake", "--json", "-q", "--device", "cpu"]) == 1
    out, err = capsys.readouterr()
    assert err == ""
    data = json.loads(out)
    assert data["ok"] is False and data["checks"] == ["fake"]
    assert data["counts"] == {"passed": 1, "failed": 1, "skipped": 1}
    by_op = {r["op"]: r["results"][0] for r in data["reports"]}
    assert by_op[f"{ns}::bad_fake"]["message"].startswith(f"opreg fake check failed for {ns}::")
    assert by_op[f"{ns}::good"]["status"] == "passed"


def test_an_op_whose_samples_fail_fails_every_check(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    opreg_namespace: OpNamespace,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = f"cli_broken_{opreg_namespace.name}"
    source = (
        "import torch\nfrom torch import Tensor\nfrom opreg_core import register_vmap_op\n"
        "def broken(device):\n    raise RuntimeError('no data')\n"
        "def f(x: Tensor) -> Tensor:\n    return x.clone()\n"
        f"register_vmap_op(f, name='{opreg_namespace.qualname('f')}', fake_fn=torch.empty_like, "
        "sample_inputs=broken)\n"
    )
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert main(["check", name, "--checks", "fake,vmap", "-q"]) == 1
    finally:
        sys.modules.pop(name, None)
    out = capsys.readouterr().out
    assert "FAIL" in out and "sample_inputs('cpu') raised RuntimeError: no data" in out


def test_keyword_selects_ops_and_success_exits_zero(
    ops_module: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    module, ns = ops_module
    assert main(["check", module, "-k", "good", "--checks", "fake,vmap,opcheck", "-q"]) == 0
    assert f"{ns}::bad_fake" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no_such_module_xyz"], "cannot import module 'no_such_module_xyz': ModuleNotFoundError"),
        (["json"], "module 'json' registered no opreg op"),
        (["MOD", "--checks", "fake,speed"], "unknown check(s) 'speed'"),
        (["MOD", "--device", "gpu"], "unknown device 'gpu'"),
        (["MOD", "--compile-backend", "nope"], "unknown torch.compile backend 'nope'"),
        (["MOD", "-k", "zzz"], "no op name contains 'zzz'"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    ops_module: tuple[str, str], capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    args = [ops_module[0] if a == "MOD" else a for a in args]
    assert main(["check", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("opreg check: error: ") and message in err


def test_shipped_kernels_main_job(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("opreg_kernels")
    assert main(["check", "opreg_kernels", "--checks", "fake,kernel", "--device", "cpu", "-q"]) == 0
    out = capsys.readouterr().out
    for name in ("opreg::fused_add", "opreg::philox_uniform", "opreg::philox_normal"):
        assert f"\n{name} " in out


@pytest.mark.needs_triton
def test_main_job_runs_triton_kernels_on_cpu_in_a_fresh_process() -> None:
    """The interpreter is switched on before anything imports Triton (Philox uses its stdlib)."""
    pytest.importorskip("opreg_kernels")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    command = [sys.executable, "-m", "opreg_testing.cli", "check", "opreg_kernels"]
    done = subprocess.run(
        [
            *command,
            "--checks",
            "kernel",
            "--device",
            "cpu",
            "--triton-interpret",
            "on",
            "--json",
            "-q",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert data["triton_interpreter"] is True
    assert {r["op"]: r["results"][0]["info"]["kernel"] for r in data["reports"]} == {
        "opreg::fused_add": "triton",
        "opreg::philox_uniform": "triton",
        "opreg::philox_normal": "triton",
    }


def test_console_script_and_pytest_plugin_are_declared() -> None:
    scripts = importlib.metadata.entry_points(group="console_scripts", name="opreg")
    assert [e.value for e in scripts] == ["opreg_testing.cli:main"]
    plugins = importlib.metadata.entry_points(group="pytest11", name="opreg")
    assert [e.value for e in plugins] == ["opreg_testing.plugin"]


def test_runs_as_a_program() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "opreg_testing.cli", "check", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0
    assert "--triton-interpret {auto,on,off}" in textwrap.dedent(done.stdout)
