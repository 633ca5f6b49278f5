"""``opreg bench MODULE``: the command's options and its run (the glue between the
``opreg`` command, :func:`~opreg_testing.bench.api.bench_ops`, the table, JSON, plots and
budgets). ``opreg bench --help`` imports no torch."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from .rows import RATIOS, SECTIONS

EXIT_STATUS = """exit status:
  0  every op was benchmarked within its budgets (ops that cannot be benchmarked, e.g.
     without sample_inputs, are listed with the reason)
  1  a budget (--max-ratio) was exceeded: each excess named by op, row and figure
  2  usage error, one line on stderr: bad option, size or budget, unknown or absent device,
     a module that cannot be imported or registers no op, no op that could be benchmarked,
     --plot without matplotlib"""

_DESCRIPTION = """\
Import MODULE(s) and time every opreg op they register, on each device:
  device time  the op (kernel), its fallback, torch.compile of the fallback (compiled), on a
               ladder of sizes, with bytes moved, GB/s and its share of the device's copy
               bandwidth, and peak memory on CUDA
  host time    per call on tiny inputs: the op, its launcher, a bare torch.library op
  fwd+bwd      forward + backward of the op against autograd through the fallback
  vmap         vmap(op) against a loop over the batch and against vmap(fallback)
Where no Triton kernel serves the device, "kernel" is the op itself (running its fallback)
and "launcher" the fallback. Inputs: sample_inputs(device, size=n) when the hook takes a
size, else the op's first sample scaled up. Timing: warm-up, interleaved rounds, medians
and spread; CUDA events with the L2 flushed on GPUs, a plain timer on the CPU."""


def add_parser(commands: Any, module_help: str) -> argparse.ArgumentParser:
    """Add ``bench`` to the ``opreg`` command's subparsers."""
    bench: argparse.ArgumentParser = commands.add_parser(
        "bench",
        help="time every opreg op a module registers: kernel, fallback, compiled, host, "
        "fwd+bwd, vmap",
        description=_DESCRIPTION,
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument("modules", nargs="+", metavar="MODULE", help=module_help)
    bench.add_argument(
        "--ops",
        metavar="NAMES",
        help="comma-separated op names (ns::name or name) to benchmark; default: every op",
    )
    bench.add_argument(
        "--device",
        action="append",
        dest="devices",
        metavar="DEVICE",
        help="cpu, cuda or cuda:N (comma-separated or repeated); default: cuda when present, "
        "else cpu. A device that is not present is a usage error",
    )
    bench.add_argument(
        "--sizes",
        metavar="SIZES",
        help="the size ladder: elements of the largest input, comma-separated (4096, 64K, "
        "16M, 2^20); default 2^12..2^28 on CUDA, 2^10..2^22 on the CPU, x16 apart",
    )
    bench.add_argument(
        "--quick",
        action="store_true",
        help="two sizes (2^10, 2^14 on the CPU; 2^16, 2^24 on CUDA) and 5 rounds",
    )
    bench.add_argument(
        "--no-compile",
        dest="compile",
        action="store_false",
        help="leave out the compiled column (torch.compile of the fallback, slow to compile "
        "on the CPU)",
    )
    bench.add_argument(
        "--sections",
        metavar="NAMES",
        help=f"comma-separated sections to run (default all: {','.join(SECTIONS)})",
    )
    bench.add_argument(
        "--rounds", type=int, metavar="N", help="timing rounds (default 15; --quick 5)"
    )
    bench.add_argument(
        "--vmap-batch",
        type=int,
        default=8,
        metavar="N",
        help="entries of the vmap batch (default 8)",
    )
    bench.add_argument(
        "--sample", metavar="NAME", help="scale the op's sample of this name (default: the first)"
    )
    bench.add_argument(
        "--no-flush",
        dest="flush_l2",
        action="store_false",
        help="do not flush the L2 cache before each timed CUDA call",
    )
    bench.add_argument(
        "--max-ratio",
        action="append",
        default=[],
        metavar="RATIO=LIMIT",
        help=f"a budget: exit 1 when a row's ratio exceeds LIMIT; RATIO is one of "
        f"{', '.join(RATIOS)} (repeatable)",
    )
    bench.add_argument(
        "--json", action="store_true", help="print a JSON report instead of the table"
    )
    bench.add_argument(
        "--plot",
        metavar="DIR",
        help="write one PNG per op into DIR: time and bandwidth against size (needs "
        "matplotlib: pip install 'opreg-testing[bench]')",
    )
    bench.add_argument("-q", "--quiet", action="store_true", help="no progress line on stderr")
    return bench


def _options(
    args: argparse.Namespace,
) -> tuple[dict[str, float], tuple[int, ...] | None, tuple[str, ...] | None]:
    """Budgets, sizes and sections from the options (``UsageError`` for bad ones)."""
    from ..modules import UsageError
    from .budgets import parse_budgets
    from .ladder import parse_sizes

    try:
        budgets = parse_budgets(args.max_ratio)
        sizes = parse_sizes(args.sizes) if args.sizes else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    sections = None
    if args.sections:
        sections = tuple(s.strip() for s in args.sections.split(",") if s.strip())
        unknown = [s for s in sections if s not in SECTIONS]
        if unknown or not sections:
            named = ", ".join(unknown) or "(none)"
            raise UsageError(f"unknown section(s) {named}; choose from {', '.join(SECTIONS)}")
    if args.rounds is not None and args.rounds < 1:
        raise UsageError(f"--rounds must be >= 1, got {args.rounds}")
    if args.vmap_batch < 1:
        raise UsageError(f"--vmap-batch must be >= 1, got {args.vmap_batch}")
    if args.plot:
        from importlib.util import find_spec

        from .plot import INSTALL

        if find_spec("matplotlib") is None:
            raise UsageError(f"--plot needs matplotlib, which is not installed: {INSTALL}")
    return budgets, sizes, sections


def _devices(args: argparse.Namespace) -> list[str]:
    import torch

    from ..devices import TRITON_CPU, device_problem, parse_devices
    from ..modules import UsageError

    if not args.devices:
        return ["cuda" if torch.cuda.is_available() else "cpu"]
    try:
        devices = list(parse_devices(args.devices))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for device in devices:
        if device == TRITON_CPU:
            raise UsageError(
                f"{TRITON_CPU} runs Triton kernels through Triton's interpreter, whose times say "
                "nothing about the kernel: benchmark on cuda (or cpu, for the fallbacks)"
            )
        problem = device_problem(device)
        if problem is not None:
            raise UsageError(problem)
    return devices


def _select(ops: list[Any], names: str | None) -> list[Any]:
    from ..modules import UsageError

    if not names:
        return ops
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    chosen: list[Any] = []
    for name in wanted:
        found = [op for op in ops if name in (op.qualname, op.opname)]
        if not found:
            known = ", ".join(op.qualname for op in ops)
            raise UsageError(f"no op named {name!r} in the module(s); the ops: {known}")
        chosen.extend(op for op in found if op not in chosen)
    return chosen


def run(args: argparse.Namespace) -> int:
    """``opreg bench``: returns the exit status (``UsageError`` for exit status 2)."""
    from ..modules import UsageError, import_ops
    from .api import bench_ops, make_plan
    from .budgets import violations
    from .progress import BenchProgress

    budgets, sizes, sections = _options(args)
    devices = _devices(args)
    ops = _select(import_ops(args.modules, None), args.ops)

    plans = {}
    for device in devices:
        try:
            plans[device] = make_plan(
                device.split(":")[0],
                sizes=sizes,
                quick=args.quick,
                compile=args.compile,
                sections=sections,
                rounds=args.rounds,
                vmap_batch=args.vmap_batch,
                sample=args.sample,
                flush_l2=args.flush_l2,
            )
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    progress = BenchProgress(len(ops) * len(devices), None if args.quiet else sys.stderr)
    began = time.perf_counter()
    try:
        report = bench_ops(ops, devices, plans, progress, progress.done)
    finally:
        progress.close()
    elapsed = time.perf_counter() - began
    benchmarked = [r for r in report.results if r.skipped is None]
    if not benchmarked:
        reasons = "; ".join(f"{r.op} [{r.device}]: {r.skipped}" for r in report.results)
        raise UsageError(f"no op could be benchmarked: {reasons}")
    excess = violations(report, budgets)
    plots = []
    if args.plot:
        from .plot import plot

        plots = plot(report, args.plot)
    if args.json:
        data = report.to_dict()
        data["budgets"] = budgets
        data["violations"] = [v.message for v in excess]
        data["plots"] = [str(p) for p in plots]
        data["ok"] = not excess
        data["duration_s"] = round(elapsed, 3)
        print(json.dumps(data, indent=2, default=str))
    else:
        print(report.table())
        if plots:
            print("\nplots: " + ", ".join(str(p) for p in plots))
        if budgets:
            limits = ", ".join(f"{k} <= {v:g}" for k, v in budgets.items())
            print(
                f"\nbudgets: {limits}: " + ("all met" if not excess else f"{len(excess)} exceeded")
            )
        print(f"\n{len(benchmarked)} op/device pair(s) benchmarked in {elapsed:.1f}s")
    for v in excess:
        print(f"opreg bench: budget exceeded: {v.message}", file=sys.stderr)
    return 1 if excess else 0


__all__ = ["EXIT_STATUS", "add_parser", "run"]
