"""Build the wheels and sdists of the three opreg packages into one folder.

Usage: ``python scripts/build_dist.py [OUTDIR]`` (default ``dist``), normally through
``hatch run dist:build``. The folder is emptied first, so it holds exactly one release.
Each package is built with ``python -m build``: first the sdist, then the wheel *from the
unpacked sdist*, so a file the sdist forgets (the license, the README) breaks the build here
rather than on a user's machine. The build backend (hatchling) comes from the running
environment (``--no-isolation``: the ``dist`` hatch environment installs it), which saves
creating two build environments per package.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("opreg-core", "opreg-kernels", "opreg-testing")


def build(outdir: Path) -> None:
    """Empty ``outdir`` and build every package into it."""
    if outdir.exists():
        shutil.rmtree(outdir)
    outdir.mkdir(parents=True)
    for name in PACKAGES:
        print(f"--- building {name}", flush=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "build",
                "--no-isolation",
                "--outdir",
                str(outdir),
                str(ROOT / "packages" / name),
            ],
            check=True,
            cwd=ROOT,
        )
    print(f"--- built into {outdir}:")
    for path in sorted(outdir.iterdir()):
        print(f"    {path.name}")


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print("usage: python scripts/build_dist.py [OUTDIR]", file=sys.stderr)
        return 2
    build((ROOT / (argv[0] if argv else "dist")).resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
