"""Autotuned kernels and Triton backwards on CUDA (issue 13, part 4): tuning, CUDA graph
capture with and without warm-up, the direct-launch refusal, the RMSNorm example.

Skipped without CUDA (and when TRITON_INTERPRET=1); the CPU side is test_autotune.py. Each
case runs in a fresh process: a capture that fails leaves nothing behind in this one, and no
kernel is compiled or tuned before the case starts.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import opreg_kernels
from opreg_testing import interpreter_enabled

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or interpreter_enabled(),
    reason="needs a CUDA device and compiled Triton kernels",
)
HERE = Path(__file__).parent
ROOT = HERE.parents[1]


@pytest.fixture(autouse=True)
def _triton_available() -> None:
    if not opreg_kernels.has_triton():
        pytest.skip("Triton is not available")


def run_script(body: str) -> dict[str, object]:
    """Run ``body`` in a fresh interpreter (autotune_kernels importable); its last line of
    output is a JSON object, returned."""
    prelude = f"import sys; sys.path.insert(0, {str(HERE)!r})\n"
    proc = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


_OP = """
import json, torch, triton
import autotune_kernels as kernels
from opreg_kernels import TritonKernelError, register_triton_op

kernel = triton.autotune(
    configs=[triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((128, 2), (256, 4), (1024, 8))],
    key=["n"],
)(kernels.scale_kernel)

def scale(x: torch.Tensor) -> torch.Tensor:
    return (2 * x).contiguous()

op = register_triton_op(
    scale, name="gpu_autotune::scale", fake_fn=lambda x: torch.empty_like(x),
    triton_fn=kernels.scale_with(kernel),
)

def chain(exc):
    seen = []
    while exc is not None and len(seen) < 10:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen
"""


def test_autotuned_op_tunes_on_cuda_and_captures_after_warm_up() -> None:
    result = run_script(
        _OP
        + """
x = torch.randn(100_003, device="cuda")
ok = torch.equal(op(x), 2 * x)  # tunes: every config timed
best = kernel.best_config.kwargs["BLOCK"]
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    y = op(x)
x.copy_(torch.randn_like(x))
graph.replay()
torch.cuda.synchronize()
print(json.dumps({"eager": ok, "best": best, "replay": torch.equal(y, 2 * x)}))
"""
    )
    assert result["eager"] is True and result["replay"] is True
    assert result["best"] in (128, 256, 1024)


def test_capture_without_warm_up_fails_saying_to_warm_up_and_works_after_it() -> None:
    result = run_script(
        _OP
        + """
x = torch.randn(4096, device="cuda")
graph = torch.cuda.CUDAGraph()
errors = []
try:
    with torch.cuda.graph(graph):
        op(x)
except Exception as exc:
    errors = chain(exc)
opreg_errors = [e for e in errors if isinstance(e, TritonKernelError)]
torch.cuda.synchronize()
ok = torch.equal(op(x), 2 * x)  # the warm-up, outside any capture: tunes now
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    y = op(x)
x.copy_(torch.randn_like(x))
graph.replay()
torch.cuda.synchronize()
print(json.dumps({
    "raised": [type(e).__name__ for e in errors],
    "message": str(opreg_errors[0]) if opreg_errors else "",
    "after_warm_up": ok,
    "replay": torch.equal(y, 2 * x),
}))
"""
    )
    assert result["raised"], "the capture without warm-up did not fail"
    message = str(result["message"])
    assert message.startswith("opreg: gpu_autotune::scale: the Triton kernel failed"), result
    assert "while a CUDA graph was being captured" in message
    assert "Warm up first: call the op once" in message
    assert result["after_warm_up"] is True and result["replay"] is True


def test_a_backward_launching_triton_directly_is_refused_under_func_grad_on_cuda() -> None:
    result = run_script(
        """
import json, torch, triton
import autotune_kernels as kernels
from opreg_kernels import register_triton_op

def launch(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    kernels.scale_kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
    return out

def double(x: torch.Tensor) -> torch.Tensor:
    return (2 * x).contiguous()

op = register_triton_op(
    double, name="gpu_direct::double", fake_fn=lambda x: torch.empty_like(x),
    triton_fn=launch, backward=lambda ctx, g: launch(g.contiguous()),
)
x = torch.randn(1000, device="cuda", requires_grad=True)
op(x).sum().backward()
plain = torch.equal(x.grad, torch.full_like(x, 2.0))
try:
    torch.func.grad(lambda x: op(x).sum())(x.detach())
    refused = ""
except Exception as exc:
    refused = f"{type(exc).__name__}: {exc}"
print(json.dumps({"plain": plain, "refused": refused}))
"""
    )
    assert result["plain"] is True
    refused = str(result["refused"])
    assert refused.startswith(
        "DirectLaunchInDerivativeError: opreg: gpu_direct::double: the backward"
    )
    assert "Register the backward's computation as its own op" in refused


def test_the_rmsnorm_example_on_cuda() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "triton_rmsnorm.py")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rms_norm on cuda: forward, grad, compile, capture" in proc.stdout
    launches = re.search(r"fast launches \(forward, backward\): (\d+) (\d+)", proc.stdout)
    assert launches is not None and int(launches.group(1)) > 0, proc.stdout  # forward: 3 calls


def test_check_op_passes_the_rmsnorm_example_as_once_differentiable_on_cuda() -> None:
    """Issue 20, finding 4: the autotuned RMSNorm, whose backward is a Triton op registered
    without a backward (as Liger and FlashAttention write them), passes the autograd check on
    CUDA: its double backward's refusal is reported as "once differentiable", not failed, and
    its float32 kernels get finite differences on the fallbacks. (opcheck's
    test_aot_dispatch_dynamic fails for this compiler-visible autotuned op on the H200 host's
    torch 2.11 with "unhashable type: non-nested SymInt": not covered here, a separate issue.)"""
    body = f"""
    import json, runpy, torch
    from opreg_core import SampleInput
    from opreg_testing import check_op
    example = runpy.run_path({str(ROOT / "examples" / "triton_rmsnorm.py")!r})
    op = example["rms_norm"]
    def samples(device):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(4, 96, generator=g).to(device)
        w = torch.rand(96, generator=g).add(0.5).to(device)
        return [SampleInput((x, w, 1e-6))]
    report = check_op(op, samples(torch.device("cuda")), device="cuda",
                      checks="fake,vmap,autograd,kernel")
    autograd = report["autograd"]
    print(json.dumps({{"ok": report.ok, "summary": report.summary(),
                       "failures": [str(f) for f in report.failures],
                       "autograd": autograd.status,
                       "once": autograd.info.get("once_differentiable"),
                       "precision": autograd.info.get("kernel_precision"),
                       "kernel": report["kernel"].status}}))
    """
    result = run_script(body)
    assert result["ok"], "\n\n".join(map(str, result["failures"]))
    assert result["autograd"] == "passed", result["summary"]
    assert result["once"], result["summary"]
    assert result["precision"] == "float32", result["summary"]
    assert result["kernel"] == "passed", result["summary"]
