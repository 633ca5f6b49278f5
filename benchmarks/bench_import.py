"""What importing opreg costs beyond ``import torch``, measured in the same run.

Runs ``python -X importtime -c "import torch; import <package>"`` in fresh interpreters for
``opreg_core`` and ``opreg_kernels`` (which registers the shipped ops), and ``import pytest;
import opreg_testing.plugin`` for the pytest plugin (loaded by every pytest run of an
environment that has opreg-testing; it imports no torch), interleaved with a bare
``import torch`` (and a bare ``import pytest``), and prints the median of each over the runs:

- *after torch*: the import times of everything the package imports once torch is loaded, in
  the same interpreter (the sum of the top-level entries of ``-X importtime`` other than
  torch's): the figure to compare with the goal, the least noisy;
- *difference*: the median total of ``import torch; import <package>`` less the median total
  of a bare ``import torch``, both from this run (noisier: torch's own import varies by tens
  of milliseconds between runs).

The children write and read bytecode (``PYTHONDONTWRITEBYTECODE`` is dropped from their
environment; a first, untimed run of each case compiles it), as an installed wheel has it:
with the development venv's ``PYTHONDONTWRITEBYTECODE=1`` and no bytecode written yet, every
import compiles opreg's sources again (about 25 ms more for ``opreg_kernels`` on a 2-core
VM). Run: ``python benchmarks/bench_import.py`` (``--runs N``, default 5; ``--json PATH``
also writes the figures to PATH).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

from bench_core import write_json

#: case -> (the code run, the modules imported before the measured one: its baseline)
CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "torch": ("import torch", ()),
    "opreg_core": ("import torch; import opreg_core", ("torch",)),
    "opreg_kernels": ("import torch; import opreg_kernels", ("torch",)),
    "pytest": ("import pytest", ()),
    "opreg_testing.plugin": ("import pytest; import opreg_testing.plugin", ("pytest",)),
}
#: measured case -> the case it is the difference against
BASELINES = {"opreg_core": "torch", "opreg_kernels": "torch", "opreg_testing.plugin": "pytest"}
GOAL_MS = {"opreg_kernels": 30.0}


def importtime(code: str, before: tuple[str, ...]) -> tuple[float, float]:
    """(total, after) milliseconds of ``code`` in a fresh interpreter, from ``-X importtime``'s
    cumulative figures of the outermost entries: all of them, and those that come after the
    last of ``before`` has been imported (what the measured import adds)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    total = after = 0.0
    waiting = set(before)
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, cumulative, name = line.split("|")
        if not name.startswith(" ") or name.startswith("  "):
            continue  # not an outermost entry
        ms = int(cumulative) / 1000
        total += ms
        if not waiting:
            after += ms
        waiting.discard(name.strip())
    return total, after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each case")
    parser.add_argument("--json", metavar="PATH", help="also write the results to PATH")
    args = parser.parse_args()
    for code, before in CASES.values():
        importtime(code, before)  # compile the bytecode, warm the file system caches
    totals: dict[str, list[float]] = {case: [] for case in CASES}
    after: dict[str, list[float]] = {case: [] for case in CASES}
    for _ in range(args.runs):  # interleaved, so that load changes hit every case alike
        for case, (code, before) in CASES.items():
            total, added = importtime(code, before)
            totals[case].append(total)
            after[case].append(added)
    median = {case: statistics.median(v) for case, v in totals.items()}
    median_after = {case: statistics.median(v) for case, v in after.items()}
    print(
        f"python -X importtime, median of {args.runs} interleaved runs each "
        f"(Python {sys.version.split()[0]}, {os.cpu_count()} cores):"
    )
    print(f"  import torch                       {median['torch']:8.1f} ms")
    print(f"  import pytest                      {median['pytest']:8.1f} ms")
    results: dict[str, dict[str, float]] = {}
    for case, baseline in BASELINES.items():
        difference = median[case] - median[baseline]
        goal = f" (goal: <= {GOAL_MS[case]:.0f} ms)" if case in GOAL_MS else ""
        print(
            f"  {case:<22} after {baseline:<6} {median_after[case]:8.1f} ms{goal}; "
            f"difference of totals {difference:+.1f} ms"
        )
        results[case] = {
            "after_baseline_ms": median_after[case],
            "difference_ms": difference,
            "total_ms": median[case],
            "baseline_total_ms": median[baseline],
        }
    if args.json:
        write_json(
            args.json,
            "import",
            {"runs": args.runs, "cases": {k: v[0] for k, v in CASES.items()}},
            {"medians": results, "samples_total_ms": totals, "samples_after_ms": after},
        )


if __name__ == "__main__":
    main()
