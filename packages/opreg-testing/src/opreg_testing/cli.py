"""The ``opreg`` command: ``opreg check MODULE`` runs the checks on every op a module registers.

Exit status: 0 when no check failed, 1 when one did, 2 for bad usage (unknown option or
check, a module that cannot be imported or registers no op).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

_INTERPRET_HELP = (
    "run Triton kernels on CPU through Triton's interpreter (TRITON_INTERPRET=1, set before "
    "the modules are imported). auto (default): when Triton is installed and no CUDA device "
    "is present"
)


class UsageError(Exception):
    """Bad command-line input: reported in one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    from .checks import ALL_CHECKS

    parser = argparse.ArgumentParser(prog="opreg", description="Tools for opreg operators.")
    parser.add_argument("--version", action="version", version=f"opreg-testing {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    check = commands.add_parser(
        "check",
        help="run the consistency checks on every opreg op a module registers",
        description="Import MODULE(s), find every opreg op they register and run the checks "
        "on each (samples come from the ops' sample_inputs). Prints a table op x check; "
        "exits 1 if a check failed.",
    )
    check.add_argument(
        "modules", nargs="+", metavar="MODULE", help="dotted module name, e.g. opreg_kernels"
    )
    check.add_argument(
        "--device",
        action="append",
        dest="devices",
        metavar="DEVICE",
        help="cpu, cuda, cuda:N (comma-separated or repeated; default: cpu, and cuda if present)",
    )
    check.add_argument(
        "--checks",
        default=",".join(ALL_CHECKS),
        help=f"comma-separated checks to run (default: all: {','.join(ALL_CHECKS)})",
    )
    check.add_argument(
        "-k", dest="keyword", metavar="TEXT", help="only ops whose name contains TEXT"
    )
    check.add_argument(
        "--json", action="store_true", help="print a JSON report instead of the table"
    )
    check.add_argument(
        "--compile-backend",
        default="inductor",
        metavar="NAME",
        help="torch.compile backend of the compile check (default inductor; aot_eager is faster)",
    )
    check.add_argument(
        "--triton-interpret", choices=("auto", "on", "off"), default="auto", help=_INTERPRET_HELP
    )
    check.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    return parser


def _setup_interpreter(mode: str) -> None:
    """Set ``TRITON_INTERPRET=1`` when asked; must run before anything imports Triton."""
    from .interpreter import enable_interpreter, triton_installed

    if mode == "on":
        enable_interpreter()
    elif mode == "auto" and triton_installed():
        import torch

        if not torch.cuda.is_available():
            enable_interpreter()


def _import_ops(modules: Sequence[str], keyword: str | None) -> list[Any]:
    from .selection import ops_in

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: modules of the current project
    ops: list[Any] = []
    for name in modules:
        try:
            found = ops_in(name)
        except ImportError as exc:
            raise UsageError(f"cannot import module {name!r}: {type(exc).__name__}: {exc}") from exc
        if not found:
            raise UsageError(f"module {name!r} registered no opreg op")
        ops.extend(op for op in found if op not in ops)
    if keyword is not None:
        ops = [op for op in ops if keyword in op.qualname]
        if not ops:
            raise UsageError(f"no op name contains {keyword!r}")
    return ops


class Progress:
    """``[ 3/18] opreg::fused_add cpu compile pass 0.81s`` lines on a stream."""

    def __init__(self, total: int, stream: TextIO | None) -> None:
        self.total = total
        self.done = 0
        self.stream = stream

    def __call__(self, result: Any) -> None:
        from .table import cell

        self.done += 1
        if self.stream is not None:
            width = len(str(self.total))
            print(
                f"[{self.done:>{width}}/{self.total}] {result.op} {result.check}: {cell(result)}",
                file=self.stream,
                flush=True,
            )


def _unchecked(op: str, device: str, checks: Sequence[str], error: Exception) -> Any:
    """The report of an op whose samples could not be had: skipped (none) or failed (error)."""
    from .errors import CheckFailure, NoSamplesError
    from .report import CheckResult, OpReport

    report = OpReport(op, device)
    for check in checks:
        if isinstance(error, NoSamplesError):
            reason = "the op has no sample_inputs to check it with"
            report.results.append(CheckResult(check, op, "skipped", reason=reason))
        else:
            failure = CheckFailure(op, check, str(error))
            report.results.append(
                CheckResult(check, op, "failed", reason=str(error), failure=failure)
            )
    return report


def _plan(args: argparse.Namespace) -> tuple[tuple[str, ...], tuple[str, ...], list[Any]]:
    """Validate the options, set up Triton's interpreter, import the ops: checks, devices, ops."""
    from .checks.compile import check_backend
    from .devices import available_devices, parse_devices
    from .runner import select_checks

    try:
        checks = select_checks(args.checks)
        devices = parse_devices(args.devices) if args.devices else available_devices()
        check_backend(args.compile_backend)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if "triton-cpu" in devices:
        raise UsageError("use --device cpu (Triton runs on CPU through --triton-interpret)")
    return checks, devices, _import_ops(args.modules, args.keyword)


def _check_all(
    args: argparse.Namespace, checks: Sequence[str], devices: Sequence[str], ops: list[Any]
) -> list[Any]:
    """Every op on every device; an op without samples gets skipped (or failed) checks."""
    from .errors import NoSamplesError, SampleInputsError
    from .interpreter import interpreter_enabled
    from .runner import check_op

    options = {
        "compile": {"backend": args.compile_backend},
        "kernel": {"triton_interpreter": interpreter_enabled()},
    }
    options = {k: v for k, v in options.items() if k in checks}
    progress = Progress(len(ops) * len(devices) * len(checks), None if args.quiet else sys.stderr)
    reports = []
    for device in devices:
        for op in ops:
            try:
                report = check_op(
                    op, checks=checks, device=device, options=options, progress=progress
                )
            except (NoSamplesError, SampleInputsError) as exc:
                report = _unchecked(op.qualname, device, checks, exc)
                for result in report.results:
                    progress(result)
            reports.append(report)
    return reports


def _run(args: argparse.Namespace) -> int:
    _setup_interpreter(args.triton_interpret)  # first: nothing may have imported Triton yet
    from .table import counts, render_details, render_table, summary_line

    checks, devices, ops = _plan(args)
    start = time.perf_counter()
    reports = _check_all(args, checks, devices, ops)
    elapsed = time.perf_counter() - start
    if args.json:
        _print_json(args, checks, devices, reports, counts(reports), elapsed)
    else:
        print(render_table(reports, checks))
        details = render_details(reports)
        if details:
            print("\n" + details)
        print(f"\n{summary_line(reports)} in {elapsed:.1f}s")
    return 1 if any(not r.ok for r in reports) else 0


def _print_json(
    args: argparse.Namespace,
    checks: Sequence[str],
    devices: Sequence[str],
    reports: Sequence[Any],
    totals: dict[str, int],
    elapsed: float,
) -> None:
    import torch

    from . import __version__
    from .interpreter import interpreter_enabled

    data = {
        "opreg_testing": __version__,
        "torch": torch.__version__,
        "modules": list(args.modules),
        "devices": list(devices),
        "checks": list(checks),
        "triton_interpreter": interpreter_enabled(),
        "ok": totals["failed"] == 0,
        "counts": totals,
        "duration_s": round(elapsed, 3),
        "reports": [r.to_dict() for r in reports],
    }
    print(json.dumps(data, indent=2, default=str))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``opreg`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except UsageError as exc:
        print(f"opreg {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
