"""Wall time of importing opreg, as the user waits for it: fresh interpreters, median of many.

Each sample is one fresh ``python -c`` process that runs the case's set-up (``import torch``,
or ``import pytest`` for the pytest plugin), then times the measured import with
``time.perf_counter()`` and prints it. Unlike ``bench_import.py`` (``-X importtime``, which
leaves out the time an import spends outside module bodies' own accounting and adds its own
overhead), this is the wall time the statement costs. Cases:

- ``opreg_kernels``: ``import opreg_kernels`` after ``import torch`` (the goal: <= 30 ms);
- ``opreg_kernels+ops``: the same plus the first access to the four shipped ops
  (``opreg_kernels.fused_add`` ...), i.e. import and registration together;
- ``opreg_kernels/disabled``: with ``OPREG_DISABLE_TRITON=1``;
- ``opreg_kernels/no-triton``: with Triton made unimportable (``sys.modules["triton"] = None``
  before ``import torch``);
- ``opreg_core``: ``import opreg_core`` after ``import torch``;
- ``opreg_testing.plugin``: ``import opreg_testing.plugin`` after ``import pytest``.

The children write and read bytecode as an installed wheel has it (``PYTHONDONTWRITEBYTECODE``
is dropped from their environment; one untimed run of each case and variant writes it first).
``--variant NAME=DIR[:DIR...]`` adds a variant whose children get those directories in front of
``PYTHONPATH`` (e.g. a copy of an older ``packages/opreg-kernels/src``), so that two versions are
timed in the same run; rounds alternate every case and variant, rotating their order, and the
report gives each one's median, quartiles and range, and each variant's median paired
difference (same round) against the first. ``--python`` times another interpreter (e.g. a venv
with the wheels installed). Run: ``python benchmarks/bench_import_wall.py`` (``--runs N``,
default 21; ``--cases a,b`` to choose; ``--json PATH`` also writes the samples to PATH).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

#: case -> (set-up code, measured code, extra environment)
CASES: dict[str, tuple[str, str, dict[str, str]]] = {
    "opreg_kernels": ("import torch", "import opreg_kernels", {}),
    "opreg_kernels+ops": (
        "import torch",
        "import opreg_kernels\n"
        "opreg_kernels.fused_add, opreg_kernels.philox_uniform\n"
        "opreg_kernels.philox_normal, opreg_kernels.philox_normal_exact",
        {},
    ),
    "opreg_kernels/disabled": (
        "import torch",
        "import opreg_kernels",
        {"OPREG_DISABLE_TRITON": "1"},
    ),
    "opreg_kernels/no-triton": (
        "import sys\nsys.modules['triton'] = None\nimport torch",
        "import opreg_kernels",
        {},
    ),
    "opreg_core": ("import torch", "import opreg_core", {}),
    "opreg_testing.plugin": ("import pytest", "import opreg_testing.plugin", {}),
}
GOAL_MS = {"opreg_kernels": 30.0}

_CHILD = """\
import time
{setup}
_start = time.perf_counter()
{measured}
_ms = (time.perf_counter() - _start) * 1000
import json, sys
_files = [getattr(sys.modules.get(n), "__file__", None)
          for n in ("opreg_core", "opreg_kernels", "opreg_testing")]
print(json.dumps({{"ms": _ms, "files": _files}}))
"""


def sample(python: str, case: str, pythonpath: str | None) -> dict[str, Any]:
    """One fresh interpreter's figure for ``case``: ``{"ms": ..., "files": [...]}``."""
    setup, measured, extra = CASES[case]
    drop = ("PYTHONDONTWRITEBYTECODE", "OPREG_DISABLE_TRITON")  # the latter: its case sets it
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(extra)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH")) if p)
    code = _CHILD.format(setup=setup, measured=measured)
    done = subprocess.run(
        [python, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{case} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=21, help="timed rounds (default 21)")
    parser.add_argument("--python", default=sys.executable, help="interpreter to time")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=DIRS",
        help="also time with DIRS in front of PYTHONPATH (repeatable)",
    )
    parser.add_argument("--cases", help=f"comma-separated subset of: {', '.join(CASES)}")
    parser.add_argument("--json", metavar="PATH", help="also write the samples to PATH")
    args = parser.parse_args()
    cases = args.cases.split(",") if args.cases else list(CASES)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"unknown cases: {unknown}")
    variants: dict[str, str | None] = {"tree": None}
    for item in args.variant:
        name, sep, dirs = item.partition("=")
        if not sep or not name:
            parser.error(f"--variant expects NAME=DIRS, got {item!r}")
        variants[name] = dirs
    pairs = [(case, variant) for case in cases for variant in variants]
    for case, variant in pairs:  # write the bytecode, warm the file system caches
        first = sample(args.python, case, variants[variant])
        print(f"# {case} [{variant}] imports {first['files']}")
    samples: dict[tuple[str, str], list[float]] = {pair: [] for pair in pairs}
    for round_ in range(args.runs):  # alternate, rotating the order: load hits every pair alike
        shift = round_ % len(pairs)
        for case, variant in pairs[shift:] + pairs[:shift]:
            samples[case, variant].append(sample(args.python, case, variants[variant])["ms"])
    print(
        f"wall time of the measured import in fresh interpreters, {args.runs} alternating rounds "
        f"(Python {sys.version.split()[0]}, {os.cpu_count()} cores, load "
        f"{os.getloadavg()[0]:.1f}); median [quartiles] (min-max), ms:"
    )
    first_variant = next(iter(variants))
    for case, variant in pairs:
        values = samples[case, variant]
        q1, q3 = _quartiles(values)
        goal = f"  (goal <= {GOAL_MS[case]:.0f})" if case in GOAL_MS else ""
        line = (
            f"  {case:<24} {variant:<8} {statistics.median(values):7.1f} "
            f"[{q1:6.1f} {q3:6.1f}] ({min(values):6.1f}-{max(values):6.1f}){goal}"
        )
        if variant != first_variant:
            paired = [a - b for a, b in zip(values, samples[case, first_variant], strict=True)]
            line += f"  paired diff vs {first_variant}: {statistics.median(paired):+.1f}"
        print(line)
    if args.json:
        from bench_core import write_json

        write_json(
            args.json,
            "import_wall",
            {"runs": args.runs, "python": args.python, "variants": variants, "cases": cases},
            {f"{case} [{variant}]": values for (case, variant), values in samples.items()},
        )


if __name__ == "__main__":
    main()
