"""The autograd check on CUDA for kernels computing in float32 (issue 20, finding 4).

    PYTHONPATH=packages/opreg-core/src:packages/opreg-kernels/src:packages/opreg-testing/src \\
        python3 benchmarks/probes/precision_check.py

1. examples/triton_rmsnorm.py's autotuned RMSNorm (float32 Triton kernels, a Triton backward
   op without a backward): the check passes, reports float32 kernel precision and "once
   differentiable", and leaves the op's Triton kernel serving CUDA afterwards.
2. A ``register_kernel`` CUDA kernel computing in float32 (not Triton): finite differences run
   on CPU copies; a right backward passes, a backward off by 0.5 fails.
"""

from __future__ import annotations

import json
import runpy
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from opreg_core import SampleInput, register_vmap_op
from opreg_kernels import triton_kernel_info
from opreg_testing import check_op


def rmsnorm() -> None:
    op = runpy.run_path("examples/triton_rmsnorm.py")["rms_norm"]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 96, generator=g).cuda()
    w = torch.rand(96, generator=g).add(0.5).cuda()
    before = sorted(triton_kernel_info(op).device_types)
    result = check_op(op, [SampleInput((x, w, 1e-6))], checks="autograd", device="cuda")
    r = result["autograd"]
    info = {k: str(v) for k, v in r.info.items()}
    print(json.dumps({"status": r.status, "reason": r.reason, "info": info, "notes": r.notes}))
    print("device types before/after", before, sorted(triton_kernel_info(op).device_types))
    y = op(x, w, 1e-6)
    expected = torch.nn.functional.rms_norm(x, (96,), w, 1e-6)
    print("still Triton after:", torch.allclose(y, expected, atol=1e-5))


def _save_x(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(inputs[0])


def _samples(device: torch.device) -> Iterator[SampleInput]:
    yield SampleInput((torch.randn(3, 4, generator=torch.Generator().manual_seed(1)).to(device),))


def float32_cuda_kernel() -> None:
    for name, scale in (("right", 1.0), ("wrong", 0.5)):
        op = register_vmap_op(
            torch.sin,
            name=f"gpu_prec::sin_{name}",
            schema="(Tensor x) -> Tensor",
            fake_fn=torch.empty_like,
            backward=lambda ctx, g, s=scale: g * torch.cos(ctx.saved_tensors[0]) * s,
            setup_context=_save_x,
            sample_inputs=_samples,
        )
        op.register_kernel("cuda", lambda x: torch.sin(x.float()).to(x.dtype))
        r = check_op(op, checks="autograd", device="cuda")["autograd"]
        precision = r.info.get("kernel_precision")
        print(name, r.status, r.reason[:300], precision, r.info.get("finite_differences_on"))


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    rmsnorm()
    float32_cuda_kernel()
