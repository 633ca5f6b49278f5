"""Process memory stays flat over many calls: RSS after warm-up vs after N eager/vmap/grad calls.

Run: ``hatch run python benchmarks/bench_memory.py`` (about a minute). Prints the RSS at
each checkpoint and the growth after warm-up; a leak of even 100 bytes per call would show as
about 100 MB over a million calls. ``--json PATH`` also writes the readings to PATH.
"""

from __future__ import annotations

import argparse
import gc
import platform
import resource
from collections.abc import Callable
from typing import Any

import torch
from torch.func import grad, vmap

import opreg_core
from bench_core import write_json
from opreg_core import register_vmap_op


def rss_mb() -> float:
    """Current resident set size in MB (Linux /proc; the peak elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * resource.getpagesize() / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def _fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    pass


def _backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
    return g * 2


def measure(label: str, call: Callable[[], Any], n: int, checkpoints: int = 5) -> list[float]:
    for _ in range(min(n, 2000)):
        call()
    gc.collect()
    readings = [rss_mb()]
    step = n // checkpoints
    for _ in range(checkpoints):
        for _ in range(step):
            call()
        gc.collect()
        readings.append(rss_mb())
    growth = readings[-1] - readings[0]
    print(
        f"| {label:<36} | {n:>9,} | {readings[0]:>8.1f} | "
        f"{' '.join(f'{r:.1f}' for r in readings[1:]):<40} | {growth:>+7.2f} |"
    )
    return readings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--eager", type=int, default=1_000_000)
    parser.add_argument("--vmap", type=int, default=100_000)
    parser.add_argument("--json", metavar="PATH", help="also write the readings to PATH")
    args = parser.parse_args()
    torch.set_num_threads(1)
    op = register_vmap_op(
        _scale,
        fake_fn=_fake,
        vmap_fn=_scale,
        fake_vmap_fn=_fake,
        backward=_backward,
        setup_context=_setup,
        name="opreg_bench_mem::scale",
    )
    x = torch.randn(8)
    xb = torch.randn(16, 8)
    xr = torch.randn(8, requires_grad=True)
    print(
        f"opreg-core {opreg_core.__version__} | torch {torch.__version__} | Python "
        f"{platform.python_version()} | {platform.machine()}"
    )
    print(
        f"| {'calls':<36} | {'n':>9} | {'RSS MB':>8} | {'RSS MB at each fifth':<40} | "
        f"{'growth':>7} |"
    )
    print(f"|{'-' * 38}|{'-' * 11}|{'-' * 10}|{'-' * 42}|{'-' * 9}|")
    cases: list[tuple[str, Callable[[], Any], int]] = [
        ("eager op(x)", lambda: op(x), args.eager),
        ("eager op(x).backward()", lambda: op(xr).sum().backward(), args.vmap),  # type: ignore[no-untyped-call]
        ("vmap(op)(x)", lambda: vmap(op)(xb), args.vmap),
        ("vmap(vmap(op))(x)", lambda: vmap(vmap(op))(xb.reshape(4, 4, 8)), args.vmap // 2),
        ("grad(op)", lambda: grad(lambda y: op(y).sum())(x), args.vmap // 2),
    ]
    results = []
    for label, call, n in cases:
        readings = measure(label, call, n)
        results.append({
            "calls": label, "n": n, "rss_mb": readings, "growth_mb": readings[-1] - readings[0]
        })  # fmt: skip
    if args.json:
        parameters = {"eager": args.eager, "vmap": args.vmap, "checkpoints": 5}
        write_json(args.json, "memory", parameters, results)


if __name__ == "__main__":
    main()
