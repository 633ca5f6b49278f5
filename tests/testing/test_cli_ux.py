"""Messages and progress a user can follow (issue 20, finding 5): progress lines name the
device, a slow check shows that it runs, times are real (no ``FAIL 0.00s``), ``opreg --help``
imports no torch, and a misspelled keyword or ini key is named."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from opreg_testing import ALL_CHECKS, CheckResult, OpNamespace
from opreg_testing.cli import CHECK_NAMES, Progress, main
from opreg_testing.table import cell

pytest_plugins = ["pytester"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _result(status: str = "passed", duration: float = 0.42) -> CheckResult:
    return CheckResult("fake", "mylib::soft_clamp", status, duration)  # type: ignore[arg-type]


def test_a_progress_line_names_the_device() -> None:
    stream = io.StringIO()
    progress = Progress(24, stream)
    progress.start("mylib::soft_clamp", "triton-cpu", ["fake"])
    progress.done = 12
    progress(_result(), "triton-cpu")
    progress.close()
    assert stream.getvalue() == "[13/24] mylib::soft_clamp fake (triton-cpu): pass 0.42s\n"


def test_a_slow_check_gets_plain_running_lines_off_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress(2, stream, slow_after=0.2, repeat_after=0.5)
    progress.start("mylib::op", "cpu", ["fake", "vmap"])
    time.sleep(1.6)  # running from 0.2 s: a line then, another every 0.5 s
    progress(_result(duration=1.6), "cpu")
    progress.close()
    *running, last = stream.getvalue().splitlines()
    assert running[0].startswith("[1/2] mylib::op fake (cpu): running (0s so far)")
    assert len(running) >= 2
    assert all(line.startswith("[1/2] mylib::op fake (cpu): running (") for line in running)
    assert last == "[1/2] mylib::soft_clamp fake (cpu): pass 1.60s"


def test_a_slow_check_gets_a_live_line_on_a_terminal() -> None:
    stream = Terminal()
    progress = Progress(2, stream, slow_after=0.2)
    progress.start("mylib::op", "triton-cpu", ["compile"])
    time.sleep(0.7)
    progress(_result(duration=0.7), "triton-cpu")
    progress.close()
    text = stream.getvalue()
    assert "\r\x1b[K[1/2] mylib::op compile (triton-cpu): running 0s" in text
    # the result replaces the live line, on the same row, ending the line
    assert text.endswith("\r\x1b[K[1/2] mylib::soft_clamp fake (triton-cpu): pass 0.70s\n")
    assert text.count("\n") == 1


def test_a_fast_check_gets_no_running_line() -> None:
    stream = Terminal()
    progress = Progress(1, stream, slow_after=5.0)
    progress.start("mylib::op", "cpu", ["fake"])
    progress(_result(), "cpu")
    progress.close()
    assert "running" not in stream.getvalue()


def test_a_slow_check_through_opreg_check(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    opreg_namespace: OpNamespace,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A fake check whose op sleeps: the real threshold (about 2 s) prints a running line."""
    name = f"slow_{opreg_namespace.name}"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            f"""
            import time
            import torch
            from opreg_core import SampleInput, register_vmap_op

            def slow(x: torch.Tensor) -> torch.Tensor:
                time.sleep(0.6)
                return 2 * x

            register_vmap_op(
                slow,
                name="{opreg_namespace.qualname("slow")}",
                fake_fn=torch.empty_like,
                sample_inputs=lambda device: [SampleInput((torch.randn(4, device=device),))],
            )
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert main(["check", name, "--checks", "fake", "--device", "cpu"]) == 0
    finally:
        sys.modules.pop(name, None)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"[1/1] {opreg_namespace.name}::slow fake (cpu): running (")
    assert err[-1].startswith(f"[1/1] {opreg_namespace.name}::slow fake (cpu): pass ")


@pytest.mark.parametrize(
    ("status", "seconds", "text"),
    [
        ("failed", 0.0031, "FAIL 3ms"),
        ("passed", 0.0004, "pass 0ms"),
        ("failed", 0.01, "FAIL 0.01s"),
        ("passed", 1.304, "pass 1.30s"),
        ("skipped", 0.5, "skip"),
    ],
)
def test_times_are_shown_as_measured(status: str, seconds: float, text: str) -> None:
    """A check that fails at its first sample takes milliseconds: never ``FAIL 0.00s``."""
    assert cell(_result(status, seconds)) == text


def test_failed_sample_inputs_report_the_time_they_took(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    opreg_namespace: OpNamespace,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = f"late_{opreg_namespace.name}"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            f"""
            import time
            import torch
            from opreg_core import register_vmap_op

            def samples(device):
                time.sleep(0.05)
                raise RuntimeError("no data")

            def f(x: torch.Tensor) -> torch.Tensor:
                return 2 * x

            register_vmap_op(
                f, name="{opreg_namespace.qualname("f")}", fake_fn=torch.empty_like,
                sample_inputs=samples,
            )
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert main(["check", name, "--checks", "fake", "--device", "cpu"]) == 1
    finally:
        sys.modules.pop(name, None)
    line = capsys.readouterr().err.splitlines()[-1]
    seconds = float(line.rsplit(" ", 1)[1].removesuffix("s"))
    assert line.startswith(f"[1/1] {opreg_namespace.name}::f fake (cpu): FAIL ")
    assert seconds >= 0.05


@pytest.mark.parametrize("args", [["--help"], ["check", "--help"]])
def test_help_imports_no_torch(args: list[str]) -> None:
    code = (
        "import sys\nfrom opreg_testing.cli import main\n"
        f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
        "print('TORCH', 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.splitlines()[-1] == "TORCH False", done.stdout + done.stderr
    assert "usage: opreg" in done.stdout


def test_the_help_lists_the_checks_that_run() -> None:
    """``opreg check --help`` lists, torch-free, the checks that run, from their one
    declaration (``opreg_testing.check_names``), which ``opreg_testing.checks`` builds on."""
    from opreg_testing.checks import CHECKS

    assert CHECK_NAMES is ALL_CHECKS
    assert [check.name for check in CHECKS.values()] == list(CHECK_NAMES)
    for name, check in CHECKS.items():
        assert type(check).__module__ == "opreg_testing.checks._harness"
        module = sys.modules[f"opreg_testing.checks.{name}"]
        assert check in vars(module).values(), name


def test_misspelled_keywords_and_ini_keys_are_named(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nopreg_devices = cpu\n")
    pytester.makepyfile(
        test_kw="""
        import pytest
        import torch

        def test_misspelled(opreg_check):
            with pytest.raises(TypeError) as caught:
                opreg_check(torch.ops.aten.sin.default, "fake", sampels=[])
            assert str(caught.value) == (
                "opreg_check() got an unexpected keyword argument 'sampels' (did you mean "
                "'samples'?); it accepts: checks, device, options, samples, tolerance, progress"
            )
        """
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    pytester.makeini("[pytest]\nopreg_device = cpu\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: unknown opreg ini key 'opreg_device' (did you mean 'opreg_devices'?); the "
            "keys: opreg_devices, opreg_triton_interpret, opreg_seed, opreg_compile_backend, "
            "opreg_max_ratio, opreg_unchecked"
        ]
    )
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\nopreg_triton_interpet = "auto"\n')
    (pytester.path / "tox.ini").unlink()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: unknown opreg ini key 'opreg_triton_interpet' (did you mean *"]
    )


def test_a_keyword_of_needs_gpus_is_named(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nopreg_devices = cpu\n")
    pytester.makepyfile(
        test_gpus="""
        import pytest

        @pytest.mark.needs_gpus(count=2)
        def test_two_gpus():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(
        [
            "*needs_gpus() got an unexpected keyword argument 'count'; it takes the count as "
            "its one positional argument: needs_gpus(2)*"
        ]
    )
    assert result.ret != 0
