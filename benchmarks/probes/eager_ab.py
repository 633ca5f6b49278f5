"""An opreg-core change's effect on an eager call, against a baseline version, in one process.

    git worktree add /tmp/baseline HEAD~1
    python benchmarks/probes/eager_ab.py /tmp/baseline/packages/opreg-core/src/opreg_core

As ``vmap_ab.py`` (whose loader it uses): both versions register the same element-wise add
(default options: an autograd kernel, no backward) and each round times a call of each op
object on tiny CPU tensors, alternately; prints the median time of each and their ratio, and
the same for the op's call (its ``_state.call``, or the baseline's class ``__call__``) called
directly, which leaves out how the op object reaches it. ``--recorded`` adds a one-tensor op
with a backward (``x * x``), called on a tensor that requires grad (the ``recorded`` route:
the op's Function applied, forward only) and without (the ``plain`` route).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import timeit
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vmap_ab import load_baseline

import opreg_core


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def fake(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def square(x: torch.Tensor) -> torch.Tensor:
    return x * x


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(inputs[0])


def _backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
    (x,) = ctx.saved_tensors
    return 2 * g * x


def _us(call: Any, number: int) -> float:
    return min(timeit.repeat(call, number=number, repeat=3)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("baseline", type=Path, help="the baseline's opreg_core folder")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds")
    parser.add_argument("--number", type=int, default=20000, help="calls per timing")
    parser.add_argument("--recorded", action="store_true", help="also a recorded call")
    args = parser.parse_args()
    torch.set_num_threads(1)
    baseline = load_baseline(args.baseline)
    ops = {
        "baseline": baseline.register_vmap_op(add, name="eager_ab_baseline::add", fake_fn=fake),
        "this": opreg_core.register_vmap_op(add, name="eager_ab_this::add", fake_fn=fake),
    }
    x, y = torch.ones(4), torch.ones(4)
    for op in ops.values():
        op(x, y)  # the first call's checks
    state = getattr(ops["this"], "_state", None)
    direct = {
        "baseline": lambda: type(ops["baseline"]).__dict__["__call__"](ops["baseline"], x, y),
        "this": (lambda: state.call(x, y)) if state is not None else None,
    }
    times: dict[str, list[float]] = {f"{k} {w}": [] for k in ops for w in ("op", "call")}
    for _ in range(args.rounds):
        for name, op in ops.items():
            times[f"{name} op"].append(_us(lambda op=op: op(x, y), args.number))
            if direct[name] is not None:
                times[f"{name} call"].append(_us(direct[name], args.number))
    if args.recorded:
        _recorded(baseline, times, args.rounds, args.number)
    medians = {k: statistics.median(v) for k, v in times.items() if v}
    for key, value in medians.items():
        print(f"{key:22s} {value:7.3f} us")
    for what in ("op", *(("square plain", "square recorded") if args.recorded else ())):
        ratio = medians[f"this {what}"] / medians[f"baseline {what}"]
        print(f"this/baseline, {what}: {ratio:.3f}")


def _recorded(baseline: Any, times: dict[str, list[float]], rounds: int, number: int) -> None:
    """Rounds of the one-tensor op with a backward: plain and recorded, both versions."""
    kwargs: dict[str, Any] = {
        "fake_fn": lambda x: torch.empty_like(x),
        "setup_context": _setup,
        "backward": _backward,
    }
    ops = {
        "baseline": baseline.register_vmap_op(square, name="eager_ab_baseline::sq", **kwargs),
        "this": opreg_core.register_vmap_op(square, name="eager_ab_this::sq", **kwargs),
    }
    x, w = torch.ones(4), torch.ones(4, requires_grad=True)
    for op in ops.values():
        op(x), op(w)  # the first calls' checks
    for _ in range(rounds):
        for name, op in ops.items():
            plain, recorded = (lambda op=op: op(x)), (lambda op=op: op(w))
            times.setdefault(f"{name} square plain", []).append(_us(plain, number))
            times.setdefault(f"{name} square recorded", []).append(_us(recorded, number))


if __name__ == "__main__":
    main()
