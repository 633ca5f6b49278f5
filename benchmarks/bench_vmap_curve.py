"""Cost of one op call under vmap against the number of samples, at vmap depth 1, 2 and 3.

Contenders (the same element-wise add of 8-float samples, see ``bench_core.vmap_contenders``):
``torch.vmap`` of the plain function, an opreg op, ``custom_op`` + ``register_vmap``, an
EvoX-style op (one ``custom_op`` per vmap level) and a bare ``Library`` op without a batching
rule (PyTorch's per-sample fallback). At depth d the samples are split over d nested vmaps of
near-equal size (4096 at depth 3 is 16 x 16 x 16); the second argument is shared (in_dims
None), or with ``--batched-y`` batched like the first.

For each (depth, samples) the contenders are timed interleaved, block by block, each block
lasting about ``--block-ms``; the median block is kept, with the quartiles, and each median is
divided by the plain vmap's. One thread. ``--paths`` adds opreg with its vmap short paths
switched (see ``opreg_core._batching``): both off (the dispatcher path), only the twin of the
batched op without autograd kernel, only the fold of every level into one ``vmap_fn`` call;
every contender's block sets the switches, so all pay the same. Run::

    python benchmarks/bench_vmap_curve.py --json benchmarks/results/vmap_curve.json
    python benchmarks/bench_vmap_curve.py --quick      # smoke run, a few seconds
    python benchmarks/bench_vmap_curve.py --paths      # each short path alone
    python benchmarks/bench_vmap_curve.py --batched-y  # the second argument batched too
"""

from __future__ import annotations

import argparse
import math
import statistics
from typing import Any

import torch

import opreg_core._batching as batching
from bench_core import (
    OPREG_VMAP,
    PLAIN_VMAP,
    build_ops,
    calls_per_block,
    nested_vmap,
    sample_us,
    vmap_contenders,
    write_json,
)

SAMPLES = (1, 8, 64, 512, 4096)
DEPTHS = (1, 2, 3)
ELEMENTS = 8
#: ``--paths`` contenders: opreg's default op with (fold, twin) switched as given.
PATHS = {
    "opreg, short paths off": (False, False),
    "opreg, twin only": (False, True),
    "opreg, fold only": (True, False),
}


def level_sizes(samples: int, depth: int) -> tuple[int, ...]:
    """Batch sizes of ``depth`` nested vmaps (outermost first) whose product is ``samples``."""
    sizes: list[int] = []
    remaining = samples
    for levels_left in range(depth, 0, -1):
        limit = math.ceil(remaining ** (1 / levels_left) - 1e-9)
        size = max(d for d in range(1, limit + 1) if remaining % d == 0)
        sizes.append(size)
        remaining //= size
    sizes[-1] *= remaining
    return tuple(sorted(sizes, reverse=True))


def measure(
    depth: int,
    samples: int,
    contenders: dict[str, Any],
    rounds: int,
    block_s: float,
    batched_y: bool = False,
) -> list[dict[str, Any]]:
    """Time every contender at one (depth, samples); one result row per contender. ``y`` is
    shared by the samples, or batched like ``x`` with ``batched_y``."""
    sizes = level_sizes(samples, depth)
    x = torch.randn(*sizes, ELEMENTS)
    y = torch.randn(*sizes, ELEMENTS) if batched_y else torch.randn(ELEMENTS)
    in_dims = (0, 0) if batched_y else (0, None)
    expected = x + y
    thunks = {}
    for name, fn in contenders.items():
        mapped = nested_vmap(fn, depth, in_dims)
        fold, twin = PATHS.get(name, (True, True))

        def thunk(mapped: Any = mapped, fold: bool = fold, twin: bool = twin) -> Any:
            batching.short_path_enabled, batching.nograd_op_enabled = fold, twin
            return mapped(x, y)

        torch.testing.assert_close(thunk(), expected, msg=f"{name}: wrong result")
        thunks[name] = thunk
    calls = calls_per_block(thunks, block_s)
    times = sample_us(thunks, calls, rounds)
    plain = statistics.median(times[PLAIN_VMAP])
    rows = []
    for name, values in times.items():
        median = statistics.median(values)
        q1, _, q3 = (
            statistics.quantiles(values, n=4, method="inclusive")
            if len(values) > 1
            else (median,) * 3
        )
        rows.append({
            "depth": depth,
            "samples": samples,
            "level_sizes": list(sizes),
            "contender": name,
            "us_per_call": median,
            "us_q1": q1,
            "us_q3": q3,
            "ratio_to_plain_vmap": median / plain,
            "calls_per_block": calls[name],
        })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=21, help="timed blocks per case")
    parser.add_argument("--block-ms", type=float, default=20.0, help="length of one block")
    parser.add_argument("--quick", action="store_true", help="3 rounds of 2 ms blocks (smoke)")
    parser.add_argument("--json", metavar="PATH", help="also write the results to PATH")
    parser.add_argument("--paths", action="store_true", help="also opreg with short paths off")
    parser.add_argument(
        "--only-opreg", action="store_true", help="leave out custom_op, EvoX and the fallback"
    )
    parser.add_argument(
        "--batched-y", action="store_true", help="y batched like x (in_dims=(0, 0)), not shared"
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.block_ms = 3, 2.0
    torch.set_num_threads(1)
    contenders = vmap_contenders(build_ops("opreg_bench_curve", evox_levels=max(DEPTHS)))
    if args.only_opreg:
        contenders = {k: v for k, v in contenders.items() if k in (PLAIN_VMAP, OPREG_VMAP)}
    if args.paths:
        contenders.update(dict.fromkeys(PATHS, contenders[OPREG_VMAP]))
    rows: list[dict[str, Any]] = []
    print(f"| depth | samples |   levels | {'contender':<40} | {'us/call':>9} | vs plain vmap |")
    print(f"|-------|---------|----------|{'-' * 42}|{'-' * 11}|---------------|")
    for depth in DEPTHS:
        for samples in SAMPLES:
            rows_here = measure(
                depth, samples, contenders, args.rounds, args.block_ms / 1e3, args.batched_y
            )
            for row in rows_here:
                rows.append(row)
                levels = "x".join(map(str, row["level_sizes"]))
                print(
                    f"| {depth:>5} | {samples:>7} | {levels:>8} | {row['contender']:<40} "
                    f"| {row['us_per_call']:>9.1f} | {row['ratio_to_plain_vmap']:>13.2f} |",
                    flush=True,
                )
    if args.json:
        parameters = {
            "rounds": args.rounds,
            "block_ms": args.block_ms,
            "quick": args.quick,
            "paths": args.paths,
            "samples": list(SAMPLES),
            "depths": list(DEPTHS),
            "elements_per_sample": ELEMENTS,
            "threads": 1,
            "op": "x + y, x batched at every level, y "
            + ("batched too (in_dims=(0, 0))" if args.batched_y else "shared (in_dims=(0, None))"),
            "statistic": "median (and quartiles) of interleaved blocks, microseconds per call",
        }
        write_json(args.json, "vmap_curve", parameters, rows)


if __name__ == "__main__":
    main()
