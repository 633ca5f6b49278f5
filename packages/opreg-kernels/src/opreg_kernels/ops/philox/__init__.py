"""``opreg::philox_uniform`` and ``opreg::philox_normal``: counter-based random rows.

Row ``i`` of the output is a pure function of ``(seeds[i], n, counter)``: the same
on every device and backend (uniforms bit for bit), independent of the other
rows, and never touching PyTorch's global generator. Layout (EvoX-compatible):
key = (low, high) 32-bit words of the seed; Philox call ``k`` of a row uses
counter words ``((counter + k) mod 2**32, counter >> 32, 0, 0)`` and yields 4
outputs, so advancing ``counter`` by 1 skips 4 values. Uniforms are
``(u32 >> 8) * 2**-24``; normals are Box-Muller of consecutive uniform pairs.
Both ops are non-differentiable by declaration, and sharded over seeds on DTensors
(``sharding="rowwise"``): a sharded call gives the same numbers as the unsharded one.
They stay opaque to ``torch.compile`` (``compiler_visible=False``): on the H200 a visible twin
gave the same GPU time and no consistent host-time gain (benchmarks/bench_visible.py), and
torch's mutation analysis cannot parse the kernels (it then assumes the seeds are written).
The launchers' ``wrap_triton`` branch lets a user register a visible twin all the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from opreg_core import SampleInput

from ..._register import register_triton_op
from .._arguments import check_philox_args
from .exact import EXACT_NAME, philox_normal_exact_rows
from .reference import NORMAL_NAME, UNIFORM_NAME, philox_normal_rows, philox_uniform_rows

__all__ = ["philox_normal", "philox_normal_exact", "philox_uniform"]

_KERNELS = "opreg_kernels.ops.philox.triton_kernels"

Rows = Callable[[torch.Tensor, int, int], torch.Tensor]


def _rows(name: str, rows: Rows, seed_dims: int) -> Rows:
    """Checked PyTorch implementation: seeds of ``seed_dims`` dims -> ``(*seeds.shape, n)``."""

    def run(seeds: torch.Tensor, n: int, counter: int = 0) -> torch.Tensor:
        check_philox_args(name, seeds, n, counter, seed_dims)
        return rows(seeds, n, counter).reshape(*seeds.shape, n)

    return run


def _fake(name: str, seed_dims: int) -> Rows:
    def fake(seeds: torch.Tensor, n: int, counter: int = 0) -> torch.Tensor:
        check_philox_args(name, seeds, n, counter, seed_dims)
        return seeds.new_empty((*seeds.shape, n), dtype=torch.float32)

    return fake


def _sample_inputs(device: torch.device) -> Iterator[SampleInput]:
    seeds = torch.tensor([0, 1, -1, 2**40 + 7, 2**63 - 1], dtype=torch.int64, device=device)
    yield SampleInput((seeds, 9), name="odd n")
    yield SampleInput((seeds[:2], 16), {"counter": 2**32 - 2}, name="counter wraps its low word")
    yield SampleInput((seeds, 0), name="n=0")
    yield SampleInput((seeds[:0], 5), name="no seeds")


_uniform_fallback = _rows(UNIFORM_NAME, philox_uniform_rows, 1)
_normal_fallback = _rows(NORMAL_NAME, philox_normal_rows, 1)
_exact_fallback = _rows(EXACT_NAME, philox_normal_exact_rows, 1)


@register_triton_op(
    name="opreg::philox_uniform",
    sharding="rowwise",  # each row depends on its seed only: shard over seeds, same values
    fake_fn=_fake(UNIFORM_NAME, 1),
    triton_fn=f"{_KERNELS}:launch_uniform",
    vmap_fn=_rows(UNIFORM_NAME, philox_uniform_rows, 2),
    fake_vmap_fn=_fake(UNIFORM_NAME, 2),
    triton_vmap_fn=f"{_KERNELS}:launch_uniform_batched",
    differentiable=False,
    sample_inputs=_sample_inputs,
)
def philox_uniform(seeds: torch.Tensor, n: int, counter: int = 0) -> torch.Tensor:
    """``(len(seeds), n)`` float32 uniforms in [0, 1), one Philox4x32-10 stream per int64 seed.

    ``counter`` (0 <= counter < 2**63) jumps ahead: ``counter + 1`` skips 4 values.
    Bit-identical on every device and backend (module docstring gives the layout).
    """
    return _uniform_fallback(seeds, n, counter)


@register_triton_op(
    name="opreg::philox_normal",
    sharding="rowwise",  # each row depends on its seed only: shard over seeds, same values
    fake_fn=_fake(NORMAL_NAME, 1),
    triton_fn=f"{_KERNELS}:launch_normal",
    vmap_fn=_rows(NORMAL_NAME, philox_normal_rows, 2),
    fake_vmap_fn=_fake(NORMAL_NAME, 2),
    triton_vmap_fn=f"{_KERNELS}:launch_normal_batched",
    differentiable=False,
    sample_inputs=_sample_inputs,
)
def philox_normal(seeds: torch.Tensor, n: int, counter: int = 0) -> torch.Tensor:
    """``(len(seeds), n)`` float32 standard normals: Box-Muller of the ``philox_uniform`` stream.

    Outputs ``2j`` and ``2j+1`` come from uniforms ``(u1, u2)`` at the same positions:
    ``r*cos(2*pi*u2)`` and ``r*sin(2*pi*u2)`` with ``r = sqrt(-2*ln(max(u1, 1e-10)))``.
    Devices agree to within their log/sqrt/sin/cos accuracy: the Triton kernel (on NVIDIA
    GPUs the hardware log2 with a 4-term series near u1 = 1, one sin/cos range reduction and
    a sin polynomial) differs from the CPU fallback by at most 9.6e-7 absolute on 16.8 M
    values measured on an H200 (tests allow 4e-6).
    """
    return _normal_fallback(seeds, n, counter)


@register_triton_op(
    name="opreg::philox_normal_exact",
    sharding="rowwise",  # each row depends on its seed only: shard over seeds, same values
    fake_fn=_fake(EXACT_NAME, 1),
    triton_fn=f"{_KERNELS}:launch_normal_exact",
    vmap_fn=_rows(EXACT_NAME, philox_normal_exact_rows, 2),
    fake_vmap_fn=_fake(EXACT_NAME, 2),
    triton_vmap_fn=f"{_KERNELS}:launch_normal_exact_batched",
    differentiable=False,
    sample_inputs=_sample_inputs,
)
def philox_normal_exact(seeds: torch.Tensor, n: int, counter: int = 0) -> torch.Tensor:
    """``(len(seeds), n)`` float32 standard normals, the same bits on every device and backend.

    Box-Muller of the same uniform pairs as ``philox_normal`` (outputs ``2j``, ``2j+1`` from
    the uniforms at those positions), with log, sqrt, sin and cos written out as float32
    adds, multiplies, fused multiply-adds, one correctly rounded square root, and bit
    operations (:mod:`opreg_kernels.ops.philox.exact`): the CPU fallback, Triton's
    interpreter and the CUDA kernel agree bit for bit. Error against float64:
    a few ulp (``benchmarks/exact_normal_ulp.py``). A separate op rather than a keyword of
    ``philox_normal``, so that op keeps its schema, values and speed.
    """
    return _exact_fallback(seeds, n, counter)
