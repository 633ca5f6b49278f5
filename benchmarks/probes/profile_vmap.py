"""Where an opreg op's time goes under vmap, each short path alone: the Python frames one call
runs and the median time of a call against ``torch.vmap`` of the plain function (same run,
interleaved), at vmap depth 1, 2 and 3 (64 samples), for the default op and a
``differentiable=False`` one, with the short paths of ``opreg_core._batching`` switched:
``dispatcher`` (both off: ``OPREG_VMAP_SHORT_PATH=0 OPREG_VMAP_NOGRAD_OP=0``), ``twin`` (only
the batched op's twin without autograd kernel at the last level), ``fold`` (only the fold of
every level into one direct ``vmap_fn`` call) and ``both`` (the default). Run::

    python benchmarks/probes/profile_vmap.py [--frames]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import torch

import opreg_core._batching as batching

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: bench_core
from bench_core import OPREG_DEFAULT, OPREG_NONDIFF, build_ops, nested_vmap, sample_us

TORCH_DIR = torch.__file__.rsplit("/", 1)[0]


def frames(fn: Any) -> tuple[list[str], Counter[str]]:
    """Names of the opreg/user Python frames of one call, and how many torch frames by file."""
    ours: list[str] = []
    theirs: Counter[str] = Counter()

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        path = frame.f_code.co_filename
        if path.startswith(TORCH_DIR):
            theirs[path[len(TORCH_DIR) + 1 :]] += 1
        else:
            ours.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return ours[1:], theirs  # the first is the thunk itself


MODES = {
    "dispatcher": (False, False),
    "twin": (False, True),
    "fold": (True, False),
    "both": (True, True),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--frames", action="store_true", help="also list each call's frames")
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    torch.set_num_threads(1)
    ops = build_ops("opreg_profile")
    y = torch.randn(8)
    shapes = {1: (64, 8), 2: (8, 8, 8), 3: (4, 4, 4, 8)}
    print("| depth | contender | us/call | vs plain vmap | opreg/user frames |")
    print("|---|---|---|---|---|")
    for depth in (1, 2, 3):
        x = torch.randn(*shapes[depth])
        plain = nested_vmap(lambda a, b: a + b, depth)
        thunks: dict[str, Any] = {"plain vmap": lambda plain=plain, x=x: plain(x, y)}
        for label, key in (("default", OPREG_DEFAULT), ("nondiff", OPREG_NONDIFF)):
            mapped = nested_vmap(ops[key], depth)
            for mode, (fold, twin) in MODES.items():

                def run(
                    mapped: Any = mapped, fold: bool = fold, twin: bool = twin, x: Any = x
                ) -> Any:
                    batching.short_path_enabled, batching.nograd_op_enabled = fold, twin
                    return mapped(x, y)

                torch.testing.assert_close(run(), x + y)
                thunks[f"{label}, {mode}"] = run
        calls: dict[str, list[str]] = {}
        for name, thunk in thunks.items():
            thunk()
            ours, _ = frames(thunk)
            calls[name] = [f for f in ours if f not in {"run", "<lambda>"}]
        times = sample_us(thunks, 1000, args.rounds)
        base = statistics.median(times["plain vmap"])
        for name, values in times.items():
            med = statistics.median(values)
            # Frames of torch.vmap's own Python (the same in every row) are not counted.
            n = len([f for f in calls[name] if f not in VMAP_FRAMES])
            shown = " > ".join(calls[name]) if args.frames else ""
            print(f"| {depth} | {name} | {med:.1f} | {med / base:.2f} | {n} {shown} |")
    batching.short_path_enabled = batching.nograd_op_enabled = True


#: Python frames of torch.vmap itself outside torch's directory (none are opreg's).
VMAP_FRAMES = {"__new__", "helper", "__init__", "__enter__", "__exit__"}


if __name__ == "__main__":
    main()
