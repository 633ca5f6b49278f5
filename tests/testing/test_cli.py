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
    assert f"  {ns}::good [cpu]: opreg per-sample loop (" in out
    assert (
        f"Not checked (a failure):\n  nothing was checked on {ns}::no_samples [cpu]: it has no "
        "sample_inputs; register it with sample_inputs, e.g. sample_inputs=lambda device: "
        "[SampleInput((torch.randn(3, device=device),))]" in out
    )
    assert "\n3 passed, 1 failed, 2 skipped (3 ops, 1 not checked) in " in out
    assert err.splitlines()[0].startswith(f"[1/6] {ns}::good fake (cpu): pass ")
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
    assert {r["op"]: r["checked"] for r in data["reports"]} == {
        f"{ns}::good": True,
        f"{ns}::bad_fake": False,
        f"{ns}::no_samples": False,
    }
    assert [(u["op"], u["device"]) for u in data["unchecked"]] == [(f"{ns}::no_samples", "cpu")]
    assert data["allow_unchecked"] is False


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
        (
            ["no_such_module_xyz"],
            "importing 'no_such_module_xyz' failed: ModuleNotFoundError: "
            "No module named 'no_such_module_xyz'",
        ),
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


@pytest.mark.needs_triton
def test_shipped_kernels_main_job(capsys: pytest.CaptureFixture[str]) -> None:
    """On cpu alone a Triton op runs its fallback: not green, naming op, kernel and fix."""
    pytest.importorskip("opreg_kernels")
    names = (
        "opreg::fused_add",
        "opreg::philox_uniform",
        "opreg::philox_normal",
        "opreg::philox_normal_exact",
    )
    command = ["check", "opreg_kernels", "--checks", "fake,kernel", "-q"]
    assert main([*command, "--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert (
        "opreg::fused_add: its Triton kernel (opreg_kernels.ops.fused_add.triton_kernels:launch) "
        "ran on no device in this run, so only its PyTorch fallback was checked: the devices of "
        "this run (cpu) do not include triton-cpu, where it runs on CPU: add it "
        "(--device triton-cpu, or --opreg-device=triton-cpu under pytest)" in out
    )
    assert "4 passed, 0 failed, 4 skipped (4 ops), 4 Triton kernel(s) not run in " in out
    assert main([*command, "--device", "cpu", "--allow-unchecked"]) == 0
    assert "Not checked (accepted by --allow-unchecked):" in capsys.readouterr().out
    assert main([*command, "--device", "cpu,triton-cpu"]) == 0
    out = capsys.readouterr().out
    for name in names:
        assert f"\n{name} " in out
    assert "not run" not in out and "Not checked" not in out


@pytest.mark.needs_triton
def test_main_job_runs_triton_kernels_on_cpu_in_a_fresh_process() -> None:
    """--device triton-cpu turns the interpreter on before anything imports Triton (Philox
    uses Triton's standard library)."""
    pytest.importorskip("opreg_kernels")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    command = [sys.executable, "-m", "opreg_testing.cli", "check", "opreg_kernels"]
    done = subprocess.run(
        [*command, "--checks", "kernel", "--device", "triton-cpu", "--json", "-q"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert data["triton_interpreter"] is True and data["devices"] == ["triton-cpu"]
    assert {r["op"]: r["results"][0]["info"]["kernel"] for r in data["reports"]} == {
        "opreg::fused_add": "triton",
        "opreg::philox_uniform": "triton",
        "opreg::philox_normal": "triton",
        "opreg::philox_normal_exact": "triton",
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
    help_text = textwrap.dedent(done.stdout)
    assert "--triton-interpret {auto,on,off}" in help_text
    assert "--allow-unchecked" in help_text
    assert "exit status:\n  0  every op was checked and no check failed\n  1  " in help_text
    assert "\n  2  usage error, one line on stderr" in help_text


def _write_module(tmp_path: Path, name: str, source: str) -> str:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    return name


@pytest.fixture
def fresh_modules(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """tmp_path on sys.path; the modules imported from it are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        module = sys.modules.get(name)
        if str(tmp_path) in str(getattr(module, "__file__", "") or ""):
            del sys.modules[name]


def test_an_op_without_samples_fails_unless_unchecked_ops_are_allowed(
    fresh_modules: Path, opreg_namespace: OpNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 10, finding 3: "0 passed, 0 failed, 6 skipped" used to exit 0."""
    module = _write_module(
        fresh_modules,
        f"cli_unchecked_{opreg_namespace.name}",
        f"""
        import torch
        from opreg_core import register_vmap_op

        def plain(x: torch.Tensor) -> torch.Tensor:
            return 2 * x

        register_vmap_op(
            plain, name="{opreg_namespace.qualname("plain")}", fake_fn=torch.empty_like
        )
        """,
    )
    assert main(["check", module, "-q", "--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert "0 passed, 0 failed, 8 skipped (1 ops, 1 not checked)" in out
    assert "Not checked (a failure):" in out
    assert "sample_inputs=lambda device: [SampleInput((torch.randn(3, device=device),))]" in out
    assert main(["check", module, "-q", "--device", "cpu", "--allow-unchecked"]) == 0
    assert "Not checked (accepted by --allow-unchecked):" in capsys.readouterr().out
    assert main(["check", module, "-q", "--device", "cpu", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["reports"][0]["checked"] is False
    assert data["unchecked"][0]["message"].startswith(
        f"nothing was checked on {opreg_namespace.name}::plain [cpu]: it has no sample_inputs"
    )


def test_an_op_whose_checks_all_skip_is_not_checked(
    fresh_modules: Path, opreg_namespace: OpNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    """Samples without a tensor: vmap, autograd and kernel all skip, which is no check."""
    module = _write_module(
        fresh_modules,
        f"cli_all_skip_{opreg_namespace.name}",
        f"""
        import torch
        from opreg_core import SampleInput, register_vmap_op

        def zeros(n: int) -> torch.Tensor:
            return torch.zeros(n)

        register_vmap_op(
            zeros,
            name="{opreg_namespace.qualname("zeros")}",
            fake_fn=lambda n: torch.empty(n),
            sample_inputs=lambda device: [SampleInput((3,))],
        )
        """,
    )
    assert main(["check", module, "-q", "--checks", "vmap,autograd,kernel"]) == 1
    out = capsys.readouterr().out
    assert "every check skipped; give it sample_inputs with arguments the checks can use" in out
    # One check that passes is enough: the op was checked.
    assert main(["check", module, "-q", "--checks", "fake,vmap"]) == 0


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("import torch\ndef (\n", "SyntaxError: invalid syntax ({name}.py, line 2)"),
        ("raise RuntimeError('no GPU driver\\nsecond line')\n", "RuntimeError: no GPU driver"),
        ("import no_such_dependency_xyz\n", "ModuleNotFoundError: No module named 'no_such_dep"),
    ],
    ids=["syntax-error", "raises", "missing-dependency"],
)
def test_a_module_that_fails_to_import_is_a_usage_error(
    fresh_modules: Path, capsys: pytest.CaptureFixture[str], source: str, message: str
) -> None:
    """Issue 10, finding 4: one line, exit status 2, no traceback through opreg's frames."""
    name = _write_module(fresh_modules, f"cli_broken_import_{abs(hash(source))}", source)
    assert main(["check", name]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"opreg check: error: importing {name!r} failed: ")
    assert message.format(name=name) in err


def test_module_paths_are_accepted(
    fresh_modules: Path, opreg_namespace: OpNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    """MODULE may be a .py file or a package folder: its root folder goes on sys.path."""
    package = fresh_modules / "src" / f"pkg_{opreg_namespace.name}"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from . import ops\n")
    (package / "ops.py").write_text(
        textwrap.dedent(
            f"""
            import torch
            from opreg_core import SampleInput, register_vmap_op

            def triple(x: torch.Tensor) -> torch.Tensor:
                return 3 * x

            register_vmap_op(
                triple,
                name="{opreg_namespace.qualname("triple")}",
                fake_fn=torch.empty_like,
                sample_inputs=lambda device: [SampleInput((torch.randn(3, device=device),))],
            )
            """
        )
    )
    for given in (package, package / "ops.py"):
        assert main(["check", str(given), "--checks", "fake", "-q"]) == 0
        assert f"{opreg_namespace.name}::triple" in capsys.readouterr().out
    assert main(["check", str(fresh_modules / "missing.py")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    (fresh_modules / "notes.txt").write_text("")
    assert main(["check", str(fresh_modules / "notes.txt")]) == 2
    assert "is not a Python file (.py) or a package folder" in capsys.readouterr().err


def test_a_device_that_is_not_present_is_a_usage_error(
    ops_module: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 10, finding 5: not one failure per check, one usage error."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    device = "cuda" if count == 0 else f"cuda:{count}"
    assert main(["check", ops_module[0], "--device", device]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"opreg check: error: device {device!r} is not present")
        and len(err.splitlines()) == 1
    )


def test_triton_cpu_cannot_run_with_the_interpreter_off(
    ops_module: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["check", ops_module[0], "--device", "triton-cpu", "--triton-interpret", "off"]) == 2
    )
    assert "drop --triton-interpret off" in capsys.readouterr().err
