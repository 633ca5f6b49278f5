"""bench_user_kernels' rows against a hand-written Function for two opreg-core trees, in
alternating subprocesses on one host (issue #24: is a change's effect above the host's noise?).

    git archive REV packages/opreg-core/src | tar -x -C OLD
    python benchmarks/probes/ab_vs_function.py OLD/packages/opreg-core/src [--rounds 2]

Each round runs ``bench_user_kernels.bench_vs_function("cuda", 1000, 11)`` with the other tree's
opreg-core first (``old``), then this checkout's (``new``); opreg-kernels and opreg-testing
are this checkout's in both. Prints one JSON line per run: [signature, path, Function us,
opreg us, opreg / Function] per row.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = """
import json, sys
sys.path.insert(0, "benchmarks")
import bench_user_kernels as b
rows = b.bench_vs_function("cuda", 1000, 11)
print(json.dumps([[r["signature"], r["path"], r["Function us"], r["opreg us"],
                   r["opreg / Function"]] for r in rows]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old_core", help="another tree's packages/opreg-core/src")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    packages = ROOT / "packages"
    rest = f"{packages / 'opreg-kernels/src'}:{packages / 'opreg-testing/src'}"
    trees = {"old": Path(args.old_core).resolve(), "new": packages / "opreg-core/src"}
    for round_ in range(args.rounds):
        for name, core in trees.items():
            env = dict(os.environ, PYTHONPATH=f"{core}:{rest}")
            run = subprocess.run(
                [sys.executable, "-c", CODE], env=env, cwd=ROOT, capture_output=True, text=True
            )
            lines = run.stdout.strip().splitlines()
            print(name, round_, lines[-1] if lines else run.stderr[-2000:], flush=True)


if __name__ == "__main__":
    main()
