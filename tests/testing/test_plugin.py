"""The pytest plugin, tested the way a downstream project uses it: with pytest's ``pytester``.

Each test writes a throwaway test module that registers ops and calls the plugin's fixtures,
runs pytest on it, and checks the outcomes and the messages a developer would read.
"""

from __future__ import annotations

import sys
import textwrap
from typing import Any

import pytest
import torch

pytest_plugins = ["pytester"]

HEADER = """
import pytest
import torch
from torch import Tensor

from opreg_core import SampleInput, register_vmap_op


def samples(device):
    yield SampleInput((torch.arange(12.0, device=device).reshape(3, 4),), name="3x4")


def double(x: Tensor) -> Tensor:
    return 2 * x
"""


def make_tests(pytester: pytest.Pytester, body: str) -> None:
    """A test module of a throwaway project (its own ini file: no settings leak in from above)."""
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_downstream=HEADER + textwrap.dedent(body))


def test_a_passing_op_and_broken_ops_give_readable_failures(pytester: pytest.Pytester) -> None:
    make_tests(
        pytester,
        """
        def test_good(opreg_namespace, opreg_check):
            op = register_vmap_op(
                double,
                name=opreg_namespace.qualname("double"),
                fake_fn=torch.empty_like,
                vmap_fn=lambda x: 2 * x,
                fake_vmap_fn=torch.empty_like,
                sample_inputs=samples,
            )
            report = opreg_check(op, ["fake", "vmap", "opcheck"])
            assert report["vmap"].info["batching"] == "vmap_fn"

        def test_wrong_fake_shape(opreg_namespace, opreg_check):
            op = register_vmap_op(
                double,
                name=opreg_namespace.qualname("wrong_fake"),
                fake_fn=lambda x: x.new_empty(x.shape[0]),
                sample_inputs=samples,
            )
            opreg_check(op, "fake")

        def test_wrong_out_dims(opreg_namespace, opreg_check):
            op = register_vmap_op(
                double,
                name=opreg_namespace.qualname("wrong_out_dims"),
                fake_fn=torch.empty_like,
                vmap_fn=lambda x: (2 * x).movedim(0, -1),  # batch last, declared at 0
                fake_vmap_fn=lambda x: torch.empty_like(x).movedim(0, -1),
                sample_inputs=samples,
            )
            opreg_check(op, "vmap")
        """,
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*_ test_wrong_fake_shape _*",
            "opreg fake check failed for opreg_test_*::wrong_fake",
            "  sample: '3x4' (x: Tensor[3, 4] float32)",
            "  case:   static shapes",
            "  problem: the fake implementation of the op disagrees with the real output: "
            "output: shape (3,), expected (3, 4)",
            "*_ test_wrong_out_dims _*",
            "opreg vmap check failed for opreg_test_*::wrong_out_dims",
            "  sample: '3x4' (x: Tensor[3, 4] float32)",
            "  case:   vmap in_dims=(0,), batch size 3",
            "  problem: vmap(op) differs from the op stacked over the batch: "
            "output: shape (3, 4, 3), expected (3, 3, 4)",
        ]
    )
    # pytrace=False: the message, not a traceback through the plugin.
    assert "plugin.py" not in result.stdout.str()


def test_checks_that_do_not_apply_skip_with_the_reason(pytester: pytest.Pytester) -> None:
    make_tests(
        pytester,
        """
        def test_kernel(opreg_namespace, opreg_check):
            op = register_vmap_op(
                double, name=opreg_namespace.qualname("double"), fake_fn=torch.empty_like,
                sample_inputs=samples,
            )
            opreg_check(op, ["kernel", "autograd"])
        """,
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED * opreg_test_*::double on cpu: kernel: no kernel registered for device type "
            "'cpu' (kernels: none); autograd: the op has no backward"
        ]
    )


def test_device_option_parametrizes_opreg_device(pytester: pytest.Pytester) -> None:
    make_tests(
        pytester,
        """
        def test_device(opreg_device, opreg_devices):
            assert isinstance(opreg_device, torch.device)
            assert opreg_devices == ("cpu", "cuda", "triton-cpu")
        """,
    )
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-v", "--opreg-device=cpu,cuda", "--opreg-device", "triton-cpu"
    )
    cuda = torch.cuda.is_available()
    result.stdout.fnmatch_lines(
        [
            "*test_device[[]cpu[]] PASSED*",
            f"*test_device[[]cuda[]] {'PASSED' if cuda else 'SKIPPED'}*",
            "*test_device[[]triton-cpu[]] *",
        ]
    )


def test_default_devices_come_from_the_ini_file_and_bad_names_are_usage_errors(
    pytester: pytest.Pytester,
) -> None:
    make_tests(pytester, "def test_device(opreg_device):\n    assert opreg_device.type == 'cpu'\n")
    pytester.makeini("[pytest]\nopreg_devices = cpu\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-v")
    result.stdout.fnmatch_lines(
        ["opreg: devices cpu; Triton interpreter *", "*test_device[[]cpu[]] PASSED*"]
    )
    result.assert_outcomes(passed=1)
    bad = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--opreg-device=gpu")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(
        ["*--opreg-device: unknown device 'gpu': use cpu, cuda, cuda:N or triton-cpu"]
    )


def test_compile_backend_option_reaches_opreg_check(pytester: pytest.Pytester) -> None:
    make_tests(
        pytester,
        """
        def test_compile(opreg_namespace, opreg_check):
            op = register_vmap_op(
                double, name=opreg_namespace.qualname("double"), fake_fn=torch.empty_like,
                sample_inputs=samples,
            )
            report = opreg_check(op, "compile", options={"compile": {"vmap": False}})
            assert report["compile"].info == {
                "backend": "aot_eager", "dynamic": False, "vmap_cases": 0
            }
        """,
    )
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--opreg-compile-backend=aot_eager"
    )
    result.assert_outcomes(passed=1)
    bad = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--opreg-compile-backend=nope")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--opreg-compile-backend: unknown torch.compile backend 'nope'*"])


def test_capability_markers_skip_cleanly(pytester: pytest.Pytester) -> None:
    make_tests(
        pytester,
        """
        @pytest.mark.needs_cuda
        def test_cuda():
            assert torch.cuda.is_available()

        @pytest.mark.needs_gpus(64)
        def test_many_gpus():
            raise AssertionError("must not run")

        @pytest.mark.needs_gpus("two")
        def test_bad_marker():
            pass
        """,
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rs", "--strict-markers")
    cuda = torch.cuda.is_available()
    result.assert_outcomes(passed=int(cuda), skipped=2 - int(cuda), errors=1)
    lines = [f"SKIPPED * needs 64 GPUs, {torch.cuda.device_count()} present"]
    if not cuda:
        lines.insert(0, "SKIPPED * needs CUDA: no CUDA device is present")
    result.stdout.fnmatch_lines(lines, consecutive=False)
    result.stdout.fnmatch_lines(["*needs_gpus(n) takes a positive int, got 'two'*"])


def test_namespace_fixture_tears_down_its_ops(pytester: pytest.Pytester) -> None:
    make_tests(
        pytester,
        """
        from opreg_core import get_op

        NAMES = []

        def test_register(opreg_namespace):
            name = opreg_namespace.qualname("double")
            op = register_vmap_op(double, name=name, fake_fn=torch.empty_like)
            NAMES.append(op.qualname)
            assert op(torch.ones(2)).tolist() == [2.0, 2.0]

        def test_gone_afterwards(opreg_namespace):
            assert NAMES and not NAMES[0].startswith(opreg_namespace.name + "::")
            with pytest.raises(KeyError):
                get_op(NAMES[0])
            assert not hasattr(torch.ops, NAMES[0].split("::")[0]) or not hasattr(
                getattr(torch.ops, NAMES[0].split("::")[0]), "double"
            )
        """,
    )
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_seed_fixture_is_deterministic_and_restores_the_rng(pytester: pytest.Pytester) -> None:
    make_tests(
        pytester,
        """
        STATE = torch.random.get_rng_state()

        def test_seeded(opreg_seed):
            value = torch.rand(1).item()
            torch.manual_seed(opreg_seed)
            assert torch.rand(1).item() == value
            with open("seed.txt", "w") as f:
                f.write(f"{opreg_seed} {value}")

        def test_rng_restored():
            assert torch.equal(torch.random.get_rng_state(), STATE)
        """,
    )

    def seed_line(*args: str) -> str:
        pytester.runpytest_inprocess("-p", "no:cacheprovider", *args).assert_outcomes(passed=2)
        return (pytester.path / "seed.txt").read_text()

    first = seed_line()
    assert seed_line() == first
    assert seed_line("--opreg-seed=7") != first


INERT_PROBE = """
import os
import sys


def test_nothing_imported_nothing_set():
    assert "torch" not in sys.modules
    assert "TRITON_INTERPRET" not in os.environ
"""


def test_the_plugin_stays_out_of_a_project_that_does_not_use_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 10, finding 6: no torch import, no TRITON_INTERPRET, no header line."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_unrelated=INERT_PROBE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "opreg:" not in result.stdout.str()


def test_one_ini_line_turns_the_plugin_on(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``opreg_triton_interpret = auto``: today's start-up (interpreter, header line)."""
    from opreg_testing.interpreter import triton_installed

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    pytester.makeini("[pytest]\nopreg_triton_interpret = auto\n")
    interpreted = triton_installed() and not torch.cuda.is_available()
    pytester.makepyfile(
        test_user="import os\n\ndef test_env():\n"
        f"    assert (os.environ.get('TRITON_INTERPRET') == '1') is {interpreted}\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [f"opreg: devices cpu*; Triton interpreter {'on' if interpreted else 'off'}"]
    )


OPS_MODULE = """
import torch
from opreg_core import SampleInput, register_vmap_op


def checked(x: torch.Tensor) -> torch.Tensor:
    return 2 * x


def bare(x: torch.Tensor) -> torch.Tensor:
    return 2 * x


register_vmap_op(
    checked,
    name="{ns}::checked",
    fake_fn=torch.empty_like,
    sample_inputs=lambda device: [SampleInput((torch.randn(3, device=device),))],
)
register_vmap_op(bare, name="{ns}::bare", fake_fn=torch.empty_like)
"""

PARAMETRIZED = """
from opreg_core import get_op
from opreg_testing import parametrize_ops


@parametrize_ops("{module}")
def test_op(op, opreg_check):
    opreg_check(op, "fake")


def test_direct(opreg_check):
    opreg_check(get_op("{ns}::bare"), "fake")
"""


@pytest.mark.parametrize("mode", ["fail", "skip"])
def test_an_op_without_samples_fails_its_test_unless_the_ini_says_skip(
    pytester: pytest.Pytester, opreg_namespace: Any, mode: str
) -> None:
    """Issue 10, finding 3, for the plugin: parametrize_ops and opreg_check."""
    ns = opreg_namespace.name
    module = f"plugin_ops_{ns}_{mode}"
    pytester.makeini("[pytest]\n" + ("opreg_unchecked = skip\n" if mode == "skip" else ""))
    pytester.makepyfile(**{module: OPS_MODULE.format(ns=ns)})
    pytester.makepyfile(test_ops=PARAMETRIZED.format(module=module, ns=ns))
    pytester.syspathinsert()
    try:
        result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rs", "--strict-markers")
    finally:
        sys.modules.pop(module, None)
    message = (
        f"nothing was checked on {ns}::bare: it has no sample_inputs; register it with "
        "sample_inputs, e.g. sample_inputs=lambda device: "
        "[SampleInput((torch.randn(3, device=device),))] (SampleInput from opreg_core)"
    )
    pattern = "".join({"[": "[[]", "]": "[]]"}.get(c, c) for c in message)  # fnmatch-safe
    if mode == "fail":
        result.assert_outcomes(passed=1, failed=2)
        result.stdout.fnmatch_lines(
            [f"*_ test_op[[]{ns}::bare[]] _*", pattern + " (or set opreg_unchecked = skip*"]
        )
        result.stdout.fnmatch_lines(["*_ test_direct _*", pattern + " (or set*"])
    else:
        result.assert_outcomes(passed=1, skipped=2)
        result.stdout.fnmatch_lines([f"SKIPPED [[]2[]] * {pattern}"])  # both skips, one line
