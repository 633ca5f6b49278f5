"""An opreg-core change's effect under vmap, against a baseline version, in one process.

    git worktree add /tmp/baseline HEAD~1
    python benchmarks/probes/vmap_ab.py /tmp/baseline/packages/opreg-core/src/opreg_core

The machines the project is measured on vary by more between runs than a change to the vmap
rules gains, so this script times both versions interleaved in the same process: the
baseline package (its folder, given on the command line) is copied under another name
(``opreg_core_baseline``; the package imports itself relatively), both register the same
element-wise add, and each round times ``torch.vmap`` of the plain function, the baseline's
op and this checkout's op, at depth 1, 2 and 3 (64 samples), with the second argument shared
(``in_dims=(0, None)``) or batched. Prints the median ratio of each op to the plain function.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

import opreg_core

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: bench_core
from bench_core import median_us, nested_vmap

BASELINE = "opreg_core_baseline"


def load_baseline(folder: Path) -> Any:
    """The package in ``folder`` (an ``opreg_core`` source folder), imported as BASELINE."""
    if not (folder / "__init__.py").is_file():
        raise SystemExit(f"{folder} is not a package folder (no __init__.py)")
    root = Path(tempfile.mkdtemp(prefix="opreg_ab_"))
    shutil.copytree(folder, root / BASELINE)
    sys.path.insert(0, str(root))
    return importlib.import_module(BASELINE)


def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


def fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(a)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("baseline", type=Path, help="the baseline's opreg_core folder")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds per case")
    args = parser.parse_args()
    torch.set_num_threads(1)
    baseline = load_baseline(args.baseline)
    ops: dict[str, Callable[..., Any]] = {
        "baseline": baseline.register_vmap_op(
            add, name="vmap_ab_baseline::add", fake_fn=fake, vmap_fn=add, fake_vmap_fn=fake
        ),
        "this": opreg_core.register_vmap_op(
            add, name="vmap_ab_this::add", fake_fn=fake, vmap_fn=add, fake_vmap_fn=fake
        ),
    }
    print(f"baseline {args.baseline}, this checkout {Path(opreg_core.__file__).parent}")
    for depth, shape in ((1, (64,)), (2, (8, 8)), (3, (4, 4, 4))):
        for shared in (True, False):
            compare(ops, depth, shape, shared, args.rounds)


def compare(
    ops: dict[str, Callable[..., Any]],
    depth: int,
    shape: tuple[int, ...],
    shared: bool,
    rounds: int,
) -> None:
    """Print both ops' median ratio to the plain function at one depth."""
    in_dims = (0, None) if shared else (0, 0)
    x = torch.randn(*shape, 8)
    y = torch.randn(8) if shared else torch.randn(*shape, 8)
    fns = {"plain": nested_vmap(add, depth, in_dims)}
    fns.update({k: nested_vmap(op, depth, in_dims) for k, op in ops.items()})
    for fn in fns.values():
        torch.testing.assert_close(fn(x, y), x + y)
    med = median_us({k: partial(fn, x, y) for k, fn in fns.items()}, 1000 // depth, rounds)
    print(
        f"depth {depth}, second argument {'shared ' if shared else 'batched'}: "
        f"plain vmap {med['plain']:.1f} us, baseline {med['baseline'] / med['plain']:.3f}x, "
        f"this {med['this'] / med['plain']:.3f}x"
    )


if __name__ == "__main__":
    main()
