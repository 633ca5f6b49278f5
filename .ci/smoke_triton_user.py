"""Smoke test of the README's install: a user's op with a Triton kernel, checked on CPU.

Run by ``.ci/run`` with the Python of a fresh venv holding torch and exactly what the README's
Install section installs (``opreg-core "opreg-kernels[triton]" "opreg-testing[kernels]"`` from
``dist/``, nothing added by hand). On a copy of ``examples/downstream`` (whose ``soft_clamp``
has a Triton kernel) it proves, under ``opreg check`` and under pytest:

1. the default devices include triton-cpu and the run is green, with soft_clamp's kernel check
   passed there, run by its Triton kernel;
2. the kernel itself ran: a copy whose kernel differs from the fallback fails on triton-cpu;
3. without a working interpreter (numpy uninstalled from this venv, LAST: it changes the
   venv) the run is not green: exit 1, naming soft_clamp, its kernel and the missing numpy.

Usage: ``python .ci/smoke_triton_user.py EXAMPLE_FOLDER`` (run from outside the checkout).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

OP = "downstream_ops::soft_clamp"
KERNEL_LINE = "y = x / (1.0 + tl.abs(x) / limit)"
FAST = ["--compile-backend", "aot_eager"]
PYTEST = ["-m", "pytest", "-p", "no:cacheprovider", "-rA", "--opreg-compile-backend=aot_eager"]

problems: list[str] = []


def run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PYTHONPATH")}
    print(f"  $ {' '.join(['python', *args])}", flush=True)
    return subprocess.run(
        [sys.executable, *args], cwd=folder, env=env, capture_output=True, text=True, check=False
    )


def expect(ok: bool, what: str, done: subprocess.CompletedProcess[str] | None = None) -> None:
    print(f"  {'ok ' if ok else 'BAD'} {what}", flush=True)
    if not ok:
        tail = "" if done is None else f"\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        problems.append(f"{what}{tail}")


def opreg_check(folder: Path, *args: str) -> tuple[int, dict[str, object]]:
    done = run(folder, "-m", "opreg_testing.cli", "check", "src/downstream_ops", "--json", *args)
    try:
        return done.returncode, json.loads(done.stdout)
    except json.JSONDecodeError:
        expect(False, "opreg check printed its JSON report", done)
        return done.returncode, {}


def kernel_result(data: dict[str, object], device: str) -> dict[str, object]:
    for report in data.get("reports", []):  # type: ignore[attr-defined]
        if report["op"] == OP and report["device"] == device:
            return next(r for r in report["results"] if r["check"] == "kernel")
    return {}


def main() -> int:
    example = Path(sys.argv[1]).resolve()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "downstream"
        shutil.copytree(example, folder, ignore=shutil.ignore_patterns("__pycache__"))

        print("1. the README's install checks the Triton kernel on triton-cpu")
        code, data = opreg_check(folder, *FAST, "-q")
        expect(code == 0 and data.get("kernels_not_run") == [], "opreg check: exit 0")
        expect("triton-cpu" in data.get("devices", []), "opreg check: triton-cpu by default")
        result = kernel_result(data, "triton-cpu")
        expect(
            result.get("status") == "passed" and result.get("info", {}).get("kernel") == "triton",
            f"opreg check: {OP}'s Triton kernel checked on triton-cpu",
        )
        done = run(folder, *PYTEST)
        expect(done.returncode == 0, "pytest: exit 0", done)
        lines = done.stdout.splitlines()
        passed = [ln for ln in lines if ln.startswith("PASSED") and "soft_clamp" in ln]
        expect(
            # 7 checks (autocast skips: the op has no autocast rule) + the known answer test
            sum("triton-cpu" in ln for ln in passed) == 8,
            f"pytest: {OP}'s tests passed on triton-cpu",
            done,
        )

        print("2. a kernel that differs from its fallback is caught: the kernel itself ran")
        kernels = folder / "src" / "downstream_ops" / "triton_kernels.py"
        source = kernels.read_text()
        expect(KERNEL_LINE in source, "the example's kernel line is where it was")
        kernels.write_text(source.replace(KERNEL_LINE, "y = x / 1.0"))
        code, data = opreg_check(folder, *FAST, "-q", "--checks", "kernel")
        result = kernel_result(data, "triton-cpu")
        expect(code == 1 and result.get("status") == "failed", "opreg check: the mutant fails")
        done = run(folder, *PYTEST, "-k", "soft_clamp and kernel")
        expect(
            done.returncode == 1 and "the kernel differs from the fallback" in done.stdout,
            "pytest: the mutant fails on triton-cpu",
            done,
        )
        kernels.write_text(source)

        print("3. without numpy Triton's interpreter cannot run: not green, and says why")
        uninstall = [sys.executable, "-m", "pip", "uninstall", "--quiet", "--yes", "numpy"]
        subprocess.run(uninstall, check=True)
        code, data = opreg_check(folder, *FAST, "-q", "--checks", "fake")
        messages = [k["message"] for k in data.get("kernels_not_run", [])]  # type: ignore[attr-defined]
        expect(
            code == 1
            and len(messages) == 1
            and messages[0].startswith(f"{OP}: its Triton kernel")
            and "No module named 'numpy'" in messages[0],
            "opreg check: exit 1 naming the op and the missing numpy",
        )
        done = run(folder, *PYTEST, "-k", "soft_clamp and fake")
        expect(
            done.returncode == 1
            and "opreg: Triton kernels not run" in done.stdout
            and "No module named 'numpy'" in done.stdout,
            "pytest: exit 1 naming the op and the missing numpy",
            done,
        )
    for problem in problems:
        print(f"smoke_triton_user: {problem}", file=sys.stderr)
    print("README install, Triton op: " + ("FAILED" if problems else "all good"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
