"""``opreg bench`` and ``bench_op``: real measurements of small ops on the CPU, the JSON form,
budgets under the command and under pytest, and the errors for bad input.

No assertion here depends on how fast anything is: budgets are exceeded with a limit of 0
(every ratio is positive), and times are only asserted to be positive.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

from opreg_core import SampleInput, VmapOp
from opreg_testing import BenchError, BenchReport, OpNamespace, bench_op
from opreg_testing.bench.budgets import parse_budgets, violations
from opreg_testing.bench.inputs import sample_at
from opreg_testing.bench.ladder import parse_sizes, size_label
from opreg_testing.bench.rows import RATIOS, SECTIONS
from opreg_testing.cli import main

from .conftest import Register

pytest_plugins = ["pytester"]

#: Few rounds and small sizes: the tests check behaviour, not speed.
QUICK: dict[str, Any] = {"rounds": 3, "device": "cpu"}


def _samples(device: torch.device, size: int | None = None) -> Any:
    n = 12 if size is None else size
    yield SampleInput((torch.randn(n, device=device), 2.0), name=f"{n} values")


def _scale(x: Tensor, s: float) -> Tensor:
    return x * s


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    ctx.s = inputs[1]


@pytest.fixture
def scale_op(register: Register) -> VmapOp[Any, Any]:
    """A small op with a backward, a vmap rule and samples that take a size."""
    return register(
        _scale,
        fake_fn=lambda x, s: torch.empty_like(x),
        vmap_fn=_scale,
        fake_vmap_fn=lambda x, s: torch.empty_like(x),
        backward=lambda ctx, g: (g * ctx.s, None),
        setup_context=_setup,
        sample_inputs=_samples,
    )


def test_bench_op_times_every_section_with_positive_medians(scale_op: VmapOp[Any, Any]) -> None:
    report = bench_op(scale_op, sizes=[64, 256], compile=False, **QUICK)
    result = report.result(scale_op.qualname, "cpu")
    assert result.skipped is None and result.stopped is None
    assert "the op itself" in result.kernel  # no kernel of its own: op against its fallback
    device = result.section("device")
    assert [row.size for row in device] == [64, 256]
    for row in device:
        for column in ("kernel", "fallback"):
            figure = row.figures[column]
            assert figure is not None and figure.median > 0 and figure.rounds == 3
            assert figure.q1 <= figure.median <= figure.q3
        assert row.figures["compiled"] is None
        assert row.missing["compiled"] == "off (--no-compile)"
        assert set(row.ratios) == {"kernel/fallback"} and row.ratios["kernel/fallback"] > 0
        assert row.bytes == 2 * row.size * 4  # x read, the output written (float32)
        gbps = row.gbps()
        assert gbps is not None and gbps > 0
    (host,) = result.section("host")
    assert {c for c, f in host.figures.items() if f is not None} == {"op", "launcher", "library"}
    assert set(host.ratios) == {"op/launcher", "op/library"}
    train = result.section("train")
    assert [r.size for r in train] == [64, 256]
    assert all(r.figures["op"] and r.figures["autograd"] for r in train)
    vmap = result.section("vmap")
    assert [r.label for r in vmap] == ["8 x 2^3 (8)", "8 x 2^5 (32)"]
    assert all(set(r.ratios) == {"vmap/loop", "vmap/fallback"} for r in vmap)
    assert report.copy_gbps["cpu"] > 0
    assert "plain timer" in report.header["timing"]["cpu"]
    table = report.table()
    assert f"{scale_op.qualname} on cpu: kernel = the op itself" in table
    assert "kernel/fallback" in table and "op/launcher" in table and "vmap/loop" in table


def test_the_compiled_column_is_torch_compile_of_the_fallback(scale_op: VmapOp[Any, Any]) -> None:
    report = bench_op(scale_op, sizes=[32], sections=["device"], **QUICK)
    (row,) = report.results[0].rows
    compiled = row.figures["compiled"]
    assert compiled is not None and compiled.median > 0
    assert "kernel/compiled" in row.ratios
    assert "fullgraph=True" in report.header["compiled"]


def test_json_round_trips(scale_op: VmapOp[Any, Any]) -> None:
    report = bench_op(scale_op, sizes=[32], sections=["device", "host"], compile=False, **QUICK)
    data = json.loads(report.to_json())
    assert data["schema"] == 1 and set(data) == {"schema", "header", "copy_gbps", "results"}
    (result,) = data["results"]
    assert result["op"] == scale_op.qualname and result["device"] == "cpu"
    device = result["rows"][0]
    assert device["section"] == "device" and device["gbps"] > 0
    assert set(device["figures"]["kernel"]) == {"median", "q1", "q3", "rounds"}
    assert BenchReport.from_dict(data) == report
    with pytest.raises(ValueError, match="not an opreg bench report"):
        BenchReport.from_dict({"schema": 99})


def test_an_op_without_a_size_parameter_has_its_first_sample_scaled(register: Register) -> None:
    def weighted(x: Tensor, w: Tensor) -> Tensor:
        return x * w

    op = register(
        weighted,
        fake_fn=lambda x, w: torch.empty_like(x),
        sample_inputs=lambda device: [
            SampleInput((torch.ones(0, 4), torch.ones(4)), name="empty"),
            SampleInput((torch.arange(12.0).reshape(3, 4), torch.ones(4)), name="3x4"),
        ],
    )
    sample = sample_at(op, torch.device("cpu"), 64)
    x, w = sample.args
    assert x.shape == (16, 4) and w.shape == (4,)  # rows repeated; the weight left alone
    assert torch.equal(x[3:6], torch.arange(12.0).reshape(3, 4))


def test_a_budget_exceeded_exits_1_naming_op_row_and_figure(
    opreg_namespace: OpNamespace,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = f"bench_mod_{opreg_namespace.name}"
    (tmp_path / f"{name}.py").write_text(
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
                sample_inputs=lambda device: [SampleInput((torch.randn(8, device=device),))],
            )
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    common = ["bench", name, "--device", "cpu", "--sizes", "64", "--no-compile", "--rounds", "2"]
    try:
        status = main(
            [*common, "--sections", "device,host", "-q", "--max-ratio", "kernel/fallback=0"]
        )
        out, err = capsys.readouterr()
        assert status == 1
        assert f"{opreg_namespace.qualname('triple')} on cpu: kernel = the op itself" in out
        assert "budgets: kernel/fallback <= 0: 1 exceeded" in out
        line = err.strip().splitlines()[-1]
        assert line.startswith(
            f"opreg bench: budget exceeded: {opreg_namespace.qualname('triple')} on cpu, "
            "device row 2^6 (64): kernel/fallback = "
        )
        assert "> 0 (kernel " in line and ", fallback " in line
        # Met budgets, and --json: exit 0, the JSON says which budgets held.
        status = main(
            [*common, "--sections", "host", "-q", "--json", "--max-ratio", "op/library=1000"]
        )
        out, _ = capsys.readouterr()
        assert status == 0
        data = json.loads(out)
        assert data["ok"] is True and data["budgets"] == {"op/library": 1000.0}
        assert data["violations"] == [] and data["results"][0]["rows"][0]["section"] == "host"
    finally:
        sys.modules.pop(name, None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-ratio", "kernel/nothing=1"], "bad budget 'kernel/nothing=1': write RATIO=LIMIT"),
        (["--max-ratio", "kernel/compiled=fast"], "the limit 'fast' is not a number"),
        (["--sizes", "12Q"], "bad size '12Q': use e.g. 4096, 64K, 16M or 2^20"),
        (["--device", "tpu9"], "unknown device 'tpu9'"),
        (["--device", "triton-cpu"], "triton-cpu runs Triton kernels through Triton's interpreter"),
        (["--sections", "device,speed"], "unknown section(s) speed; choose from device, host"),
        (["--ops", "nope"], "no op named 'nope' in the module(s); the ops: opreg::fused_add"),
    ],
)
def test_usage_errors_exit_2_in_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "opreg_kernels", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("opreg bench: error: ") and message in err
    assert len(err.splitlines()) == 1


def test_an_absent_cuda_device_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert main(["bench", "opreg_kernels", "--device", "cuda"]) == 2
    assert "device 'cuda' is not present: no CUDA device here" in capsys.readouterr().err


def test_an_op_without_samples_is_a_clear_error(register: Register) -> None:
    def bare(x: Tensor) -> Tensor:
        return x + 1

    op = register(bare, fake_fn=torch.empty_like)
    with pytest.raises(BenchError) as caught:
        bench_op(op, **QUICK)
    assert str(caught.value).startswith(
        f"opreg: {op.qualname}: has no sample_inputs to benchmark it with: register it with "
        "sample_inputs=..."
    )


def test_unknown_and_interpreter_devices_are_clear_errors(scale_op: VmapOp[Any, Any]) -> None:
    with pytest.raises(BenchError, match=rf"^opreg: {scale_op.qualname}: unknown device 'tpu9'"):
        bench_op(scale_op, device="tpu9")
    with pytest.raises(BenchError, match="triton-cpu runs Triton kernels through"):
        bench_op(scale_op, device="triton-cpu")


def _ladder_op(register: Register, limit: int) -> VmapOp[Any, Any]:
    """An op whose samples cannot be made beyond ``limit`` elements (a ladder that does not
    fit, without allocating anything large)."""

    def samples(device: torch.device, size: int | None = None) -> Any:
        if size is not None and size > limit:
            raise RuntimeError(
                f"DefaultCPUAllocator: not enough memory: you tried to allocate {4 * size} bytes"
            )
        yield SampleInput((torch.randn(size or 4, device=device),))

    def neg(x: Tensor) -> Tensor:
        return -x

    return register(neg, fake_fn=torch.empty_like, sample_inputs=samples)


def test_a_ladder_that_stops_fitting_stops_there_and_says_so(register: Register) -> None:
    op = _ladder_op(register, limit=100)
    report = bench_op(op, sizes=[16, 64, 1024, 4096], compile=False, sections=["device"], **QUICK)
    result = report.results[0]
    assert [row.size for row in result.rows] == [16, 64]
    assert result.stopped is not None
    assert result.stopped.startswith(
        "stopped at size 2^10 (1K): its inputs at size 2^10 (1K) could not be made: "
        "RuntimeError: DefaultCPUAllocator: not enough memory"
    )
    assert result.stopped.endswith("(ran 2^4 (16), 2^6 (64))")
    assert "size ladder stopped at size 2^10 (1K)" in report.table()


def test_a_ladder_that_does_not_fit_from_its_first_size_is_an_error(register: Register) -> None:
    op = _ladder_op(register, limit=10)
    with pytest.raises(BenchError, match="the size ladder does not fit from its first size"):
        bench_op(op, sizes=[16, 64], compile=False, sections=["device"], **QUICK)


def test_budgets_and_sizes_parse() -> None:
    assert parse_budgets(["kernel/compiled=1.0,op/launcher=1.2", "kernel/compiled=0.9"]) == {
        "kernel/compiled": 0.9,
        "op/launcher": 1.2,
    }
    assert parse_sizes("2^20,4K,1024,4096") == (1024, 4096, 2**20)
    assert size_label(2**28) == "2^28 (256M)" and size_label(1000) == "1000"
    assert set(RATIOS) >= {"kernel/compiled", "op/launcher"}
    assert all(RATIOS[r][1] in SECTIONS[RATIOS[r][0]] for r in RATIOS)


def test_violations_name_the_row_and_figure(scale_op: VmapOp[Any, Any]) -> None:
    report = bench_op(scale_op, sizes=[32], sections=["host"], compile=False, **QUICK)
    (found,) = violations(report, {"op/launcher": 0.0})
    assert found.message.startswith(
        f"{scale_op.qualname} on cpu, host row 2^4 (16): op/launcher = "
    )
    assert violations(report, {"op/launcher": 1e9}) == []


def test_bench_help_imports_no_torch() -> None:
    code = (
        "import sys\nfrom opreg_testing.cli import main\n"
        "try:\n    main(['bench', '--help'])\nexcept SystemExit:\n    pass\n"
        "print('TORCH', 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.splitlines()[-1] == "TORCH False", done.stdout + done.stderr
    assert "--max-ratio RATIO=LIMIT" in done.stdout and "exit status:" in done.stdout


def test_plots_one_png_per_op(scale_op: VmapOp[Any, Any], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from opreg_testing.bench.plot import plot

    report = bench_op(scale_op, sizes=[16, 64], sections=["device"], compile=False, **QUICK)
    (path,) = plot(report, tmp_path / "plots")
    assert path.name == scale_op.qualname.replace("::", "-") + ".png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


PYTEST_PROJECT = """
import torch
from opreg_core import SampleInput, register_vmap_op


def double(x: torch.Tensor) -> torch.Tensor:
    return 2 * x


def test_fast_enough(opreg_namespace, opreg_bench):
    op = register_vmap_op(
        double,
        name=opreg_namespace.qualname("double"),
        fake_fn=torch.empty_like,
        sample_inputs=lambda device: [SampleInput((torch.randn(8, device=device),))],
    )
    report = opreg_bench(op, device="cpu", sizes=[64], sections=["device"], compile=False, rounds=2)
    assert report.results[0].rows
"""


def test_the_pytest_plugin_fails_an_exceeded_budget_and_is_off_by_default(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_speed=PYTEST_PROJECT)
    off = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rs")
    off.assert_outcomes(skipped=1)
    off.stdout.fnmatch_lines(["*benchmarks are off: pass --opreg-bench*"])
    met = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--opreg-bench")
    met.assert_outcomes(passed=1)
    exceeded = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--opreg-bench", "--opreg-max-ratio", "kernel/fallback=0"
    )
    exceeded.assert_outcomes(failed=1)
    exceeded.stdout.fnmatch_lines(
        [
            "*opreg bench: budget exceeded:",
            "*::double on cpu, device row 2^6 (64): kernel/fallback = * > 0 (kernel *, fallback *",
        ]
    )
    bad = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--opreg-max-ratio", "speed=2")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--opreg-max-ratio: bad budget 'speed=2'*"])
