"""The ``opreg`` command: ``opreg check MODULE`` runs the checks on every op a module registers;
``opreg bench MODULE`` times them (:mod:`opreg_testing.bench.cli`).

Exit status: 0 when every op was checked and no check failed; 1 when a check failed, an op
was not checked at all, or a Triton op's kernel ran on no device; 2 for bad usage, reported in
one line (see ``EXIT_STATUS``). ``opreg --help`` imports no torch.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Sequence
from functools import partial
from typing import Any, TextIO

# The checks' names for ``--help``, from their one torch-free declaration.
from .check_names import CHECK_NAMES
from .modules import UsageError, import_ops

#: A check running longer than this (seconds) gets a "running" line.
SLOW_CHECK_S = 2.0

_INTERPRET_HELP = (
    "set TRITON_INTERPRET=1 before the modules are imported, so that Triton kernels can run "
    "on CPU through Triton's interpreter (device triton-cpu). auto (default): when Triton is "
    "installed and no CUDA device is present, or when --device triton-cpu is asked for"
)

_DEVICE_HELP = (
    "cpu, cuda, cuda:N or triton-cpu (comma-separated or repeated). cpu runs each op as "
    "registered for the CPU (the PyTorch fallback of a Triton op); triton-cpu runs every "
    "check on the CPU with each Triton op's Triton kernel, through Triton's interpreter. "
    "Default (the pytest plugin's too): cpu, cuda if present, and triton-cpu when Triton "
    "kernels can run on CPU here; an op without a Triton kernel is not run again on "
    "triton-cpu when cpu is checked. A device that is not present is a usage error"
)

_MODULE_HELP = (
    "a dotted module name (opreg_kernels; the current folder is on the import path) or the "
    "path of a .py file or package folder (src/mymod.py: the folder above its packages goes "
    "on the import path)"
)

#: The exit statuses, as ``opreg check --help`` lists them.
EXIT_STATUS = """exit status:
  0  every op was checked and no check failed
  1  a check failed, or an op was not checked at all: it has no sample_inputs or every
     check skipped, or a Triton op's kernel ran on no device (only its fallback was
     checked: Triton missing or failing to import, its interpreter off, no GPU);
     --allow-unchecked accepts these
  2  usage error, one line on stderr: bad option, unknown check or device, a device that
     is not present, a module that cannot be imported or that registers no op"""


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="opreg",
        description="Tools for opreg operators.",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"opreg-testing {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    check = commands.add_parser(
        "check",
        help="run the consistency checks on every opreg op a module registers",
        description="Import MODULE(s), find every opreg op they register and run the checks\n"
        "on each (samples come from the ops' sample_inputs). Prints a table op x check;\n"
        "exits 1 if a check failed or an op was not checked at all.",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument("modules", nargs="+", metavar="MODULE", help=_MODULE_HELP)
    check.add_argument(
        "--device", action="append", dest="devices", metavar="DEVICE", help=_DEVICE_HELP
    )
    check.add_argument(
        "--checks",
        default=None,
        help=f"comma-separated checks to run (default: all: {','.join(CHECK_NAMES)})",
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
    check.add_argument(
        "--allow-unchecked",
        action="store_true",
        help="do not fail for ops that nothing checked (no sample_inputs, or every check "
        "skipped) or whose Triton kernel ran on no device; they are still listed",
    )
    check.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    from .bench.cli import add_parser as add_bench

    add_bench(commands, _MODULE_HELP)
    return parser


def _setup_interpreter(mode: str, devices: Sequence[str] | None) -> None:
    """Set ``TRITON_INTERPRET=1`` when asked; must run before anything imports Triton."""
    from .devices import TRITON_CPU
    from .interpreter import start_interpreter

    wants_triton_cpu = devices is not None and TRITON_CPU in devices
    if mode == "off" and wants_triton_cpu:
        raise UsageError(
            f"--device {TRITON_CPU} runs Triton's interpreter: drop --triton-interpret off"
        )
    start_interpreter(mode, needed=wants_triton_cpu)


class Progress:
    """Progress lines on a stream, one per check: ``[ 3/18] opreg::fused_add compile (cpu):
    pass 0.81s``.

    A check running longer than ``slow_after`` seconds shows that it runs: on a terminal a
    live line (``running 5s``, redrawn until the result replaces it), otherwise a plain line
    then and every ``repeat_after`` seconds. Call :meth:`start` before each op's checks (it
    says which checks come), the instance with each result, and :meth:`close` at the end.
    """

    def __init__(
        self,
        total: int,
        stream: TextIO | None,
        *,
        slow_after: float = SLOW_CHECK_S,
        repeat_after: float = 30.0,
    ) -> None:
        self.total = total
        self.done = 0
        self.stream = stream
        self.slow_after = slow_after
        self.repeat_after = repeat_after
        self.live = stream is not None and stream.isatty()
        self._coming: list[str] = []
        self._op = self._device = ""
        self._started = 0.0
        self._shown = 0.0  # when the last "running" note was shown (0: none for this check)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def _prefix(self, number: int, op: str, check: str, device: str) -> str:
        width = len(str(self.total))
        return f"[{number:>{width}}/{self.total}] {op} {check} ({device}): "

    def start(self, op: str, device: str, checks: Sequence[str]) -> None:
        """The checks of ``op`` on ``device`` begin, in the order of ``checks``."""
        with self._lock:
            self._op, self._device, self._coming = op, device, list(checks)
            self._started, self._shown = time.perf_counter(), 0.0
        if self.stream is not None and self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="opreg-progress", daemon=True)
            self._ticker.start()

    def __call__(self, result: Any, device: str) -> None:
        from .table import cell

        with self._lock:
            self.done += 1
            if result.check in self._coming:
                self._coming.remove(result.check)
            self._started, self._shown = time.perf_counter(), 0.0
            if self.stream is not None:
                erase = "\r\x1b[K" if self.live else ""
                prefix = self._prefix(self.done, result.op, result.check, device)
                print(f"{erase}{prefix}{cell(result)}", file=self.stream, flush=True)

    def _tick(self) -> None:
        while not self._stop.wait(0.25):
            with self._lock:
                self._note_running()

    def _note_running(self) -> None:
        """Show the running check if it has run long enough (called with the lock held)."""
        if self.stream is None or not self._coming:
            return
        now = time.perf_counter()
        running = now - self._started
        if running < self.slow_after:
            return
        if not self.live and self._shown and now - self._shown < self.repeat_after:
            return
        self._shown = now
        prefix = self._prefix(self.done + 1, self._op, self._coming[0], self._device)
        if self.live:
            print(f"\r\x1b[K{prefix}running {running:.0f}s", end="", file=self.stream, flush=True)
        else:
            print(f"{prefix}running ({running:.0f}s so far)", file=self.stream, flush=True)

    def close(self) -> None:
        """Stop the live line (the run is over)."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()


def _without_samples(
    op: str, device: str, checks: Sequence[str], error: Exception, elapsed: float
) -> Any:
    """The report of an op whose samples could not be had: skipped (none) or failed (error:
    each check failed with it, after ``elapsed`` seconds spent calling ``sample_inputs``)."""
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
                CheckResult(check, op, "failed", elapsed, reason=str(error), failure=failure)
            )
    return report


def _plan(args: argparse.Namespace) -> tuple[tuple[str, ...], tuple[str, ...], list[Any]]:
    """Validate the options, set up Triton's interpreter, import the ops: checks, devices, ops."""
    from .devices import default_devices, device_problem, parse_devices

    try:
        devices = parse_devices(args.devices) if args.devices else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    _setup_interpreter(args.triton_interpret, devices)  # before anything imports Triton
    from .checks.compile import check_backend
    from .runner import select_checks

    try:
        checks = select_checks(args.checks)
        check_backend(args.compile_backend)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for device in devices or ():
        problem = device_problem(device)
        if problem is not None:
            raise UsageError(problem)
    ops = import_ops(args.modules, args.keyword)
    return checks, devices or default_devices(), ops


def _plan_runs(ops: Sequence[Any], devices: Sequence[str]) -> list[tuple[str, Any]]:
    """(device, op) pairs to check: an op without a Triton kernel runs on triton-cpu what it
    runs on cpu, so it is checked there only when cpu is not among the devices."""
    from .devices import TRITON_CPU
    from .interpreter import triton_info

    return [
        (device, op)
        for device in devices
        for op in ops
        if not (device == TRITON_CPU and "cpu" in devices and triton_info(op) is None)
    ]


def _check_all(
    args: argparse.Namespace, checks: Sequence[str], devices: Sequence[str], ops: list[Any]
) -> list[Any]:
    """Every op on every device; an op without samples gets skipped (or failed) checks."""
    from .errors import NoSamplesError, SampleInputsError
    from .runner import check_op

    options = {"compile": {"backend": args.compile_backend}} if "compile" in checks else {}
    runs = _plan_runs(ops, devices)
    progress = Progress(len(runs) * len(checks), None if args.quiet else sys.stderr)
    reports = []
    try:
        for device, op in runs:
            progress.start(op.qualname, device, checks)
            report_progress = partial(progress, device=device)
            began = time.perf_counter()
            try:
                report = check_op(
                    op, checks=checks, device=device, options=options, progress=report_progress
                )
            except (NoSamplesError, SampleInputsError) as exc:
                elapsed = time.perf_counter() - began
                report = _without_samples(op.qualname, device, checks, exc, elapsed)
                for result in report.results:
                    report_progress(result)
            reports.append(report)
    finally:
        progress.close()
    return reports


def _kernels_not_run(
    reports: Sequence[Any], ops: Sequence[Any], devices: Sequence[str]
) -> list[dict[str, str]]:
    """The Triton ops whose Triton kernel no check ran, on any device: op, kernel, reason."""
    from .errors import kernel_not_run_message
    from .interpreter import kernel_name, kernel_not_run_reason, triton_info, triton_ran

    found = []
    for op in ops:
        if triton_info(op) is None:
            continue
        if any(r.op == op.qualname and triton_ran(r) for r in reports):
            continue
        kernel, reason = kernel_name(op), kernel_not_run_reason(devices)
        found.append(
            {
                "op": op.qualname,
                "kernel": kernel,
                "reason": reason,
                "message": kernel_not_run_message(op.qualname, kernel, reason),
            }
        )
    return found


def _not_checked(reports: Sequence[Any], ops: Sequence[Any]) -> list[dict[str, str]]:
    """The reports of ops nothing checked (no failure, no pass), each with the message."""
    from .errors import unchecked_message

    without_samples = {op.qualname for op in ops if op.sample_inputs is None}
    return [
        {
            "op": r.op,
            "device": r.device,
            "message": unchecked_message(
                f"{r.op} [{r.device}]", has_samples=r.op not in without_samples
            ),
        }
        for r in reports
        if r.ok and not r.checked
    ]


def _triton_warning() -> str | None:
    """A line for the summary when Triton is installed but cannot run (fails to import)."""
    from .interpreter import triton_installed, triton_problem

    if not triton_installed():
        return None
    problem = triton_problem()
    if problem is None:
        return None
    return f"Warning: {problem}; every Triton op runs its PyTorch fallback"


def _run(args: argparse.Namespace) -> int:
    from .paths import paths_lines
    from .table import counts, render_details, render_table, summary_line

    checks, devices, ops = _plan(args)
    start = time.perf_counter()
    reports = _check_all(args, checks, devices, ops)
    elapsed = time.perf_counter() - start
    unchecked = _not_checked(reports, ops)
    kernels = _kernels_not_run(reports, ops, devices)
    not_green = bool(unchecked or kernels) and not args.allow_unchecked
    failed = any(not r.ok for r in reports) or not_green
    warning = None if kernels else _triton_warning()  # else the kernels' reason says it
    if args.json:
        totals = counts(reports)
        _print_json(args, checks, devices, reports, totals, unchecked, kernels, not failed, elapsed)
    else:
        print(render_table(reports, checks))
        details = render_details(reports)
        if details:
            print("\n" + details)
        if unchecked or kernels:
            verdict = "accepted by --allow-unchecked" if args.allow_unchecked else "a failure"
            lines = [u["message"] for u in unchecked] + [k["message"] for k in kernels]
            print(f"\nNot checked ({verdict}):\n" + "\n".join(f"  {line}" for line in lines))
        if warning is not None:
            print(f"\n{warning}")
        print("\n" + "\n".join(paths_lines()))
        note = f", {len(kernels)} Triton kernel(s) not run" if kernels else ""
        print(f"\n{summary_line(reports)}{note} in {elapsed:.1f}s")
    return 1 if failed else 0


def _print_json(
    args: argparse.Namespace,
    checks: Sequence[str],
    devices: Sequence[str],
    reports: Sequence[Any],
    totals: dict[str, int],
    unchecked: list[dict[str, str]],
    kernels: list[dict[str, str]],
    ok: bool,
    elapsed: float,
) -> None:
    import torch

    from . import __version__
    from .interpreter import interpreter_enabled
    from .paths import paths_data

    data = {
        "opreg_testing": __version__,
        "torch": torch.__version__,
        "fast_paths": paths_data(),
        "modules": list(args.modules),
        "devices": list(devices),
        "checks": list(checks),
        "triton_interpreter": interpreter_enabled(),
        "allow_unchecked": args.allow_unchecked,
        "ok": ok,
        "counts": totals,
        "unchecked": unchecked,
        "kernels_not_run": kernels,
        "triton_warning": _triton_warning(),
        "duration_s": round(elapsed, 3),
        "reports": [r.to_dict() for r in reports],
    }
    print(json.dumps(data, indent=2, default=str))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``opreg`` console script; returns the exit status (see --help)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "bench":
            from .bench.cli import run as bench

            return bench(args)
        return _run(args)
    except UsageError as exc:
        print(f"opreg {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
