"""What the installed opreg pytest plugin costs a project that does not use it.

Runs ``pytest --co -q`` in a fresh empty folder, alternately with the plugin (it loads through
its ``pytest11`` entry point) and without it (``-p no:opreg``), and prints the median wall
time of each and their difference; the goal is a difference within noise (about 50 ms or
less). It also says whether either run imported torch or set ``TRITON_INTERPRET`` (neither
should). Run: ``hatch run python benchmarks/bench_plugin_startup.py`` (``--runs N``,
default 15 each; ``--json PATH`` also writes the figures to PATH).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_core import write_json

#: A conftest that records what the plugin left behind at start-up, for the side-effect check.
_PROBE = (
    "import os, sys\n"
    "def pytest_collection_finish(session):\n"
    "    print('torch imported:', 'torch' in sys.modules)\n"
    "    print('TRITON_INTERPRET:', os.environ.get('TRITON_INTERPRET'))\n"
)


def _pytest(folder: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PYTEST_ADDOPTS")}
    command = [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *extra]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 5):  # 5: no tests collected, as expected in an empty folder
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")
    return done


def timed(folder: Path, *extra: str) -> float:
    start = time.perf_counter()
    _pytest(folder, *extra)
    return time.perf_counter() - start


def side_effects(folder: Path, *extra: str) -> dict[str, str]:
    """``torch imported`` and ``TRITON_INTERPRET`` as a probe conftest saw them."""
    (folder / "conftest.py").write_text(_PROBE)
    try:
        out = _pytest(folder, "-s", *extra).stdout
    finally:
        (folder / "conftest.py").unlink()
    found = {}
    for line in out.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key in ("torch imported", "TRITON_INTERPRET"):
            found[key] = value
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15, help="runs with and without the plugin")
    parser.add_argument("--json", metavar="PATH", help="also write the results to PATH")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="opreg_bench_startup_") as name:
        folder = Path(name)
        _pytest(folder)  # warm the file system caches once
        with_plugin: list[float] = []
        without: list[float] = []
        for _ in range(args.runs):  # alternate, so that load changes hit both alike
            with_plugin.append(timed(folder))
            without.append(timed(folder, "-p", "no:opreg"))
        effects = side_effects(folder)
    median_with, median_without = statistics.median(with_plugin), statistics.median(without)
    difference_ms = (median_with - median_without) * 1000
    print(f"pytest --co -q in an empty folder, median of {args.runs} runs each:")
    print(f"  with the opreg plugin    {median_with * 1000:8.1f} ms")
    print(f"  with -p no:opreg         {median_without * 1000:8.1f} ms")
    print(f"  difference               {difference_ms:+8.1f} ms (goal: <= 50 ms)")
    print(
        f"  with the plugin: torch imported at start-up: {effects.get('torch imported')}, "
        f"TRITON_INTERPRET: {effects.get('TRITON_INTERPRET')}"
    )
    if args.json:
        write_json(
            args.json,
            "plugin_startup",
            {"runs": args.runs, "command": "pytest --co -q -p no:cacheprovider"},
            {
                "median_with_plugin_s": median_with,
                "median_without_plugin_s": median_without,
                "difference_ms": difference_ms,
                "with_plugin_s": with_plugin,
                "without_plugin_s": without,
                "torch_imported": effects.get("torch imported") == "True",
                "triton_interpret": effects.get("TRITON_INTERPRET"),
            },
        )


if __name__ == "__main__":
    main()
