"""What an ``autocast`` rule costs and saves on a GPU: an RMSNorm-like Triton op (the kernel of
``tests/kernels/autocast_kernels.py``) on float32 activations, called

- outside any region (float32 kernel),
- in a ``torch.autocast("cuda", dtype=torch.bfloat16)`` region with ``autocast="lower_precision"``
  (two casts, then the bf16 kernel),
- outside a region on inputs already in bf16 (the bf16 kernel alone),

and, in the same region, captured in a CUDA graph. Prints microseconds per call (CUDA events,
median of blocks) for a small and a large activation. Run from the repository root with the
packages on ``PYTHONPATH`` (``benchmarks/gpu/run_gpu.sh autocast`` does).
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.kernels

from opreg_kernels import register_triton_op


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def _time_us(fn: Callable[[], Any], number: int = 200, blocks: int = 15) -> float:
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(blocks):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(number):
            fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1000 / number)
    return statistics.median(samples)


def main() -> None:
    op = register_triton_op(
        _rms_norm,
        name="opreg_bench_autocast::rms_norm",
        fake_fn=lambda x, w, eps: torch.empty_like(x),
        triton_fn="tests.kernels.autocast_kernels:launch",
        differentiable=False,
        autocast="lower_precision",
    )
    print(f"torch {torch.__version__} | {torch.cuda.get_device_name()}")
    print("| rows x cols | fp32, no region | bf16 region (rule) | bf16 inputs, no region | graph |")
    print("|---|---|---|---|---|")
    for rows, cols in ((64, 1024), (16384, 4096)):
        x = torch.randn(rows, cols, device="cuda")
        w = torch.randn(cols, device="cuda")
        xh, wh = x.to(torch.bfloat16), w.to(torch.bfloat16)
        fp32 = _time_us(partial(op, x, w, 1e-6))
        plain_bf16 = _time_us(partial(op, xh, wh, 1e-6))
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = op(x, w, 1e-6)
            assert out.dtype == torch.bfloat16
            torch.testing.assert_close(out, _rms_norm(xh, wh, 1e-6), rtol=2e-2, atol=2e-2)
            region = _time_us(partial(op, x, w, 1e-6))
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                captured = op(x, w, 1e-6)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(captured, out)
        replay = _time_us(graph.replay)
        print(f"| {rows} x {cols} | {fp32:.1f} | {region:.1f} | {plain_bf16:.1f} | {replay:.1f} |")


if __name__ == "__main__":
    main()
