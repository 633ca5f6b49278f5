"""Host time per call of the Philox normal ops on small outputs (CUDA), twice over.

    python benchmarks/probes/probe_exact_host.py

Microseconds per call (``bench_kernels.host_us``: the median of 15 rounds of 2000 calls queued
back to back, after 50 warm-up calls), for ``philox_normal`` and ``philox_normal_exact`` as ops
and as bare ``launch_rows`` calls, on 1000 x 100 (short rows) and 100 x 1000. Then the number of
compiled kernels each fast launch holds. Run from the repository root with the packages
importable (``run_gpu.sh``'s ``use_source_tree``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from opreg_kernels import philox_normal
from opreg_kernels.ops.philox import philox_normal_exact
from opreg_kernels.ops.philox import triton_kernels as kernels

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_kernels import host_us


def main() -> None:
    seeds = torch.arange(1000, device="cuda")
    rows = kernels.launch_rows
    for _ in range(2):
        found = {
            "normal op": host_us(lambda: philox_normal(seeds, 100)),
            "exact op": host_us(lambda: philox_normal_exact(seeds, 100)),
            "launch_rows normal": host_us(lambda: rows(seeds, 100, 0, normal=True)),
            "launch_rows exact": host_us(lambda: rows(seeds, 100, 0, normal=True, exact=True)),
            "launch_rows exact block 1024 warps 4": host_us(
                lambda: rows(seeds, 100, 0, normal=True, exact=True, block=1024, num_warps=4)
            ),
            "launch_rows normal 512": host_us(lambda: rows(seeds, 100, 0, normal=True, block=512)),
            "exact 100x1000 op": host_us(lambda: philox_normal_exact(seeds[:100], 1000)),
            "normal 100x1000 op": host_us(lambda: philox_normal(seeds[:100], 1000)),
        }
        print({k: round(v, 2) for k, v in found.items()}, flush=True)
    print("fast cache sizes", len(kernels._long_rows._cache), len(kernels._short_rows._cache))


if __name__ == "__main__":
    main()
