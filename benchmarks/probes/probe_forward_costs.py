"""Where a recorded forward of a user's Triton op goes beyond a hand-written Function on this
host (issue #24: ``bench_user_kernels``' forward rows, 1.11-1.18x on the H200).

    python benchmarks/probes/probe_forward_costs.py [--rounds 21] [--number 1000]
                                                 (a CUDA device; from the repository root)

For ``bench_user_kernels``' 1-tensor and 6-argument ops (fast-launched Triton kernels on 4x64
CUDA tensors requiring grad), interleaved blocks, median µs per call of:

- ``Function``: the hand-written Function around the launcher;
- ``opreg``: the op's call (the direct call);
- ``opreg, no key read``: the same with the tensors' dispatch key sets not read (each reads as
  a plain CUDA tensor's: what the direct call would learn), to see what the reads cost;
- ``op's Function``: the Function the direct call applies, applied without the direct call's
  checks;
- ``dispatcher kernel (no grad)``: the kernel opreg registered for CUDA around the user's
  launcher (device guard, error wrapping), under ``torch.no_grad()``;
- ``key read``: one tensor's key set, read as the direct call reads it.

A diagnostic, not a benchmark: the shortcuts above are not correct routes in general.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
for folder in ("packages/opreg-core/src", "packages/opreg-kernels/src", "benchmarks"):
    sys.path.insert(0, str(ROOT / folder))

import bench_user_kernels  # noqa: E402  (the ops and Functions of its issue #24 rows)
from bench_core import median_us  # noqa: E402
from opreg_core import _direct_call, _private  # noqa: E402  (the pieces, to time them alone)


def closure(op: Any) -> dict[str, Any]:
    """The direct call's closure variables (its ``applies`` and ``serving`` tables)."""
    call = type(op).__dict__["__call__"]
    return {
        name: cell.cell_contents
        for name, cell in zip(call.__code__.co_freevars, call.__closure__, strict=True)
    }


def thunks_for(
    op: Any, function: Callable[..., Any], inputs: tuple[Any, ...], device: str
) -> dict[str, Callable[[], Any]]:
    """The contenders of one signature (see the module docstring)."""
    op(*inputs)  # records once: the Function for the device's kernel exists
    cells = closure(op)
    apply = next(iter(cells["applies"].values()))
    registered = cells["serving"][device].kernel
    plain_raw = _private.dispatch_keys_raw(torch.empty(0, device=device))
    read = _direct_call.dispatch_keys_raw
    x = inputs[0]

    def no_key_read(t: torch.Tensor) -> int:
        return plain_raw

    def opreg_no_read() -> Any:
        _direct_call.dispatch_keys_raw = no_key_read  # type: ignore[assignment]
        try:
            return op(*inputs)
        finally:
            _direct_call.dispatch_keys_raw = read

    def kernel_no_grad() -> Any:
        with torch.no_grad():
            return registered(*inputs)

    return {
        "Function": lambda: function(*inputs),
        "opreg": lambda: op(*inputs),
        "opreg, no key read": opreg_no_read,
        "op's Function": lambda: apply(*inputs),
        "dispatcher kernel (no grad)": kernel_no_grad,
        "key read": lambda: read(x),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--number", type=int, default=1000)
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of the script")
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = args.device
    ops = bench_user_kernels.build_vs_function(device)
    name = torch.cuda.get_device_name() if device == "cuda" else device
    print(f"torch {torch.__version__} | {name} | µs per call, median of {args.rounds} blocks")
    for signature, fns in ops.items():
        inputs = bench_user_kernels._vs_function_inputs(signature, device, True)
        thunks = thunks_for(fns["opreg"], fns["Function"], inputs, device)
        us = median_us(thunks, args.number, args.rounds)
        if device == "cuda":
            torch.cuda.synchronize()
        print(f"\n## {signature}")
        for label, value in us.items():
            print(f"| {label:<28} | {value:7.2f} | {value / us['Function']:5.3f}x Function |")


if __name__ == "__main__":
    main()
