"""One meaning of "run Triton on CPU" (issue 10, finding 8): on the device ``triton-cpu`` every
check that runs the op runs its Triton kernel, through ``opreg check`` as through the plugin.

Runs in a fresh process: ``TRITON_INTERPRET`` must be set before Triton is imported. A Triton
op whose launcher counts its calls shows which checks ran the kernel; a second op, whose
backward calls the launcher itself wherever Triton serves the device, fails under
``torch.func.grad`` on ``triton-cpu`` and passes on ``cpu``, where the fallback runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.needs_triton
pytest.importorskip("opreg_kernels")

OPS = """
import torch
import triton
import triton.language as tl
from torch import Tensor

import opreg_kernels
from opreg_core import SampleInput
from opreg_kernels import register_triton_op

LAUNCHES = [0]


@triton.jit
def _double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)


def launch(x):
    LAUNCHES[0] += 1
    x = x.contiguous()
    out = torch.empty_like(x)
    _double[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
    return out


def samples(device):
    yield SampleInput((torch.randn(3, 5, device=device),), name="3x5")


def setup_context(ctx, inputs, output):
    pass


def backward(ctx, g):
    return 2 * g


def backward_launching(ctx, g):
    # The mistake: the backward calls the launcher itself wherever Triton serves the device.
    return launch(g) if opreg_kernels.triton_supports_device(g.device) else 2 * g


def counted(x: Tensor) -> Tensor:  # contiguous output, like the launcher's
    return (2 * x).contiguous()


def grad_launches(x: Tensor) -> Tensor:
    return (2 * x).contiguous()


def fake(x):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


for fn, bw in ((counted, backward), (grad_launches, backward_launching)):
    register_triton_op(
        fn,
        name=f"tcpu::{fn.__name__}",
        fake_fn=fake,
        triton_fn=launch,
        backward=bw,
        setup_context=setup_context,
        sample_inputs=samples,
    )
"""

DRIVER = """
import contextlib
import io
import json
import sys

from opreg_testing import ALL_CHECKS
from opreg_testing.cli import main


def check(device, checks, keyword):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["check", "tcpu_ops", "-k", keyword, "--device", device, "--checks", checks,
                     "--compile-backend", "aot_eager", "--json", "-q"])
    return code, json.loads(out.getvalue())


results = {}
for device in ("triton-cpu", "cpu"):  # triton-cpu first: the interpreter is on from the start
    for name in ALL_CHECKS:
        before = sys.modules["tcpu_ops"].LAUNCHES[0] if "tcpu_ops" in sys.modules else 0
        code, data = check(device, name, "counted")
        result = data["reports"][0]["results"][0]
        results[f"{device} {name}"] = {
            "exit": code,
            "status": result["status"],
            "reason": result["reason"],
            "launches": sys.modules["tcpu_ops"].LAUNCHES[0] - before,
            "kernels_not_run": [k["op"] for k in data["kernels_not_run"]],
        }
    code, data = check(device, "autograd", "grad_launches")
    result = data["reports"][0]["results"][0]
    results[f"{device} backward"] = {"exit": code, "status": result["status"],
                                     "message": result["message"]}
# Without the second-derivative part, the grad(vmap)/vmap(grad) part names the cause.
from opreg_core import get_op
from opreg_testing import check_op

report = check_op(get_op("tcpu::grad_launches"), checks="autograd", device="triton-cpu",
                  options={"autograd": {"gradgrad": False}})
results["check_op backward"] = {"device": report.device,
                                "message": str(report.results[0].failure)}
# The single checks take the same device.
import opreg_testing
from opreg_testing import CheckFailure

single_options = {"compile": {"backend": "aot_eager"}}
for name in ALL_CHECKS:
    before = sys.modules["tcpu_ops"].LAUNCHES[0]
    check_fn = getattr(opreg_testing, f"check_{name}")
    result = check_fn(get_op("tcpu::counted"), device="triton-cpu", **single_options.get(name, {}))
    results[f"single {name}"] = {"status": result.status,
                                 "launches": sys.modules["tcpu_ops"].LAUNCHES[0] - before}
try:
    opreg_testing.check_autograd(get_op("tcpu::grad_launches"), device="triton-cpu",
                                 gradgrad=False)
    results["single backward"] = "passed"
except CheckFailure as exc:
    results["single backward"] = str(exc)
print("RESULTS " + json.dumps(results))
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder: Path = tmp_path_factory.mktemp("triton_cpu")
    (folder / "tcpu_ops.py").write_text(textwrap.dedent(OPS))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", DRIVER], cwd=folder, env=env, capture_output=True, text=True
    )
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULTS ")), None)
    assert line is not None, done.stdout[-3000:] + done.stderr[-3000:]
    found: dict[str, Any] = json.loads(line.removeprefix("RESULTS "))
    return found


CHECKS = ("fake", "vmap", "compile", "export", "autograd", "kernel", "opcheck")


@pytest.mark.parametrize("check", CHECKS)
def test_every_check_runs_the_triton_kernel_on_triton_cpu(
    results: dict[str, Any], check: str
) -> None:
    outcome = results[f"triton-cpu {check}"]
    assert outcome["exit"] == 0 and outcome["status"] == "passed", outcome
    assert outcome["kernels_not_run"] == []
    assert outcome["launches"] > 0, f"the {check} check never launched the Triton kernel"


@pytest.mark.parametrize("check", CHECKS)
def test_plain_cpu_runs_the_fallback(results: dict[str, Any], check: str) -> None:
    """On cpu alone the checks run the fallback; the Triton kernel ran on no device, so the
    run is not green (exit 1), whichever check passed."""
    outcome = results[f"cpu {check}"]
    assert outcome["launches"] == 0, outcome
    assert outcome["exit"] == 1 and outcome["kernels_not_run"] == ["tcpu::counted"], outcome
    if check == "kernel":  # skipped, saying how to run the kernel
        assert outcome["status"] == "skipped"
        assert "its Triton kernel runs on CPU on the device triton-cpu" in outcome["reason"]
        assert "--device triton-cpu" in outcome["reason"]
    else:
        assert outcome["status"] == "passed", outcome


def test_a_backward_that_launches_triton_is_caught_on_triton_cpu(
    results: dict[str, Any],
) -> None:
    assert results["cpu backward"]["status"] == "passed"
    caught = results["triton-cpu backward"]
    assert caught["exit"] == 1 and caught["status"] == "failed"
    assert caught["message"].startswith("opreg autograd check failed for tcpu::grad_launches")
    direct = results["check_op backward"]
    assert direct["device"] == "triton-cpu"
    assert "NotImplementedError: Cannot access storage of TensorWrapper" in direct["message"]


@pytest.mark.parametrize("check", CHECKS)
def test_single_checks_take_triton_cpu_too(results: dict[str, Any], check: str) -> None:
    outcome = results[f"single {check}"]
    assert outcome["status"] == "passed", outcome
    assert outcome["launches"] > 0, f"check_{check}(device='triton-cpu') never launched Triton"
    assert "Cannot access storage of TensorWrapper" in results["single backward"]
