"""Where a user's Triton op spends its host time, launcher by launcher (issue #21, part 5).

    python benchmarks/probes/profile_fast_in_op.py [--calls 20000] [--repeats 7] [--out DIR]

Needs CUDA (an H200 host in the issue). A tiny ``axpy`` kernel (16 elements: the host is the
limit), launched four ways and wrapped three ways, all timed in one run:

1. **Layers** (µs per call; ``--repeats`` interleaved rounds of ``--calls`` queued calls per
   row, see ``bench_kernels.host_us_rounds``): the launcher's own PyTorch work
   (``torch.empty_like``), a no-op launcher, the plain launcher (``kernel[grid]``) and the
   ``fast_launch`` launcher, each called directly, inside a bare ``torch.library`` op (the
   dispatcher's own crossing into a Python kernel, no opreg), and inside a
   ``register_triton_op`` op (``differentiable=False``); how many launches of the fast rows
   took the fast path.
2. **Stages of a fast launch**: ``FastKernel``'s launch timed stage by stage
   (``perf_counter_ns`` between stages) when the launcher is called directly and from inside
   each op, in interleaved rounds; the branch each launch took is counted.
3. **cProfile** of the fast launcher alone and of its op (Python functions only), written to
   ``DIR/cprofile_*.txt``.

Prints the tables last; ``DIR/profile.json`` holds every figure.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import json
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared timer
from bench_kernels import host_us_rounds, median_ratio
from opreg_kernels import fast_launch, register_triton_op

#: The module that holds FastKernel (renamed in issue #21: found, not named).
_launch_module = sys.modules[fast_launch.__module__]
FastKernel = _launch_module.FastKernel


@triton.jit  # type: ignore[untyped-decorator]
def _axpy_kernel(x_ptr, y_ptr, out_ptr, n, a, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, a * x + tl.load(y_ptr + offsets, mask=mask), mask=mask)


#: Per stage of a staged fast launch: [calls, total ns]; and the branches taken.
STAGES: dict[str, list[int]] = {}
BRANCHES: dict[str, int] = {}


def _stage(name: str, ns: int) -> None:
    entry = STAGES.setdefault(name, [0, 0])
    entry[0] += 1
    entry[1] += ns


class StagedKernel(FastKernel):  # type: ignore[misc, valid-type]
    """``FastKernel`` whose launch times each stage (the same code, with clocks between)."""

    def _launch(self, grid: Any, /, *args: Any, **kwargs: Any) -> Any:
        m = _launch_module
        clock = time.perf_counter_ns
        t0 = clock()
        if not self._enabled or m.cuda_current_device is None or m.cuda_raw_stream is None:
            BRANCHES["disabled"] = BRANCHES.get("disabled", 0) + 1
            return self.kernel[grid](*args, **kwargs)
        tensor = torch.Tensor
        traced = any(
            type(v) is not tensor and isinstance(v, tensor) for v in (*args, *kwargs.values())
        )
        t1 = clock()
        _stage("enabled + traced check", t1 - t0)
        if traced:
            BRANCHES["traced (wrap_triton)"] = BRANCHES.get("traced (wrap_triton)", 0) + 1
            return torch.library.wrap_triton(self.kernel)[grid](*args, **kwargs)
        device = m.cuda_current_device()
        t2 = clock()
        _stage("cuda_current_device", t2 - t1)
        found = self._lookup(device, args, kwargs)
        t3 = clock()
        _stage("_lookup", t3 - t2)
        idle = m.launch_hooks_idle(self._runtime)
        t4 = clock()
        _stage("launch_hooks_idle", t4 - t3)
        if found is None or found[2] is None or not idle:
            BRANCHES["Triton's path"] = BRANCHES.get("Triton's path", 0) + 1
            compiled = self.kernel[grid](*args, **kwargs)
            if compiled is not None and (found is None or found[2] is None):
                self._remember(device, args, kwargs, found, compiled)
            return compiled
        bound, (launch, compiled) = found[1], found[2]
        sizes = grid(bound) if callable(grid) else grid
        count = len(sizes)
        stream = m.cuda_raw_stream(device)
        t5 = clock()
        _stage("grid + cuda_raw_stream", t5 - t4)
        try:
            launch(
                sizes[0], sizes[1] if count > 1 else 1, sizes[2] if count > 2 else 1, stream,
                *bound.values(),
            )  # fmt: skip
        except Exception:
            BRANCHES["launch failed"] = BRANCHES.get("launch failed", 0) + 1
            return self.kernel[grid](*args, **kwargs)
        t6 = clock()
        _stage("compiled launch (C)", t6 - t5)
        BRANCHES["fast"] = BRANCHES.get("fast", 0) + 1
        self.fast_calls += 1
        return compiled


def _before(path: str) -> Any:
    """``fast_launch`` of another version of its module (``--before``), loaded as a module of
    ``opreg_kernels`` beside the current one, to compare both in one run."""
    spec = importlib.util.spec_from_file_location("opreg_kernels._launch_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.fast_launch


def _launchers(before: str | None) -> dict[str, Callable[..., torch.Tensor]]:
    fast = fast_launch(_axpy_kernel)
    staged = StagedKernel(_axpy_kernel)
    launchers: dict[str, Callable[..., torch.Tensor]] = {}
    if before:
        old = _before(before)(_axpy_kernel)

        def old_(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(x)
            old[(1,)](x, y, out, x.numel(), 2.0, BLOCK=16)
            return out

        old_.kernel = old  # type: ignore[attr-defined]
        launchers["fast-before"] = old_

    def noop(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    def plain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _axpy_kernel[(1,)](x, y, out, x.numel(), 2.0, BLOCK=16)
        return out

    def fast_(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        fast[(1,)](x, y, out, x.numel(), 2.0, BLOCK=16)
        return out

    def staged_(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        clock = time.perf_counter_ns
        t0 = clock()
        out = torch.empty_like(x)
        t1 = clock()
        _stage("launcher: torch.empty_like", t1 - t0)
        staged[(1,)](x, y, out, x.numel(), 2.0, BLOCK=16)
        _stage("launcher: fast[grid](...) whole", clock() - t1)
        return out

    fast_.kernel = fast  # type: ignore[attr-defined]
    staged_.kernel = staged  # type: ignore[attr-defined]
    return {"noop": noop, "plain": plain, "fast": fast_, "staged": staged_, **launchers}


def _ops(launchers: dict[str, Callable[..., torch.Tensor]]) -> dict[str, Any]:
    """Per launcher: a bare torch.library op (CUDA kernel = the launcher) and an opreg op."""
    lib = torch.library.Library("prof_bare", "DEF")
    ops: dict[str, Any] = {"_lib": lib}

    def ref(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return 2.0 * x + y

    for name, launcher in launchers.items():
        opname = name.replace("-", "_")
        lib.define(f"{opname}(Tensor x, Tensor y) -> Tensor")
        lib.impl(opname, launcher, "CUDA")
        ops[f"bare {name}"] = getattr(torch.ops.prof_bare, opname).default
        ops[f"opreg {name}"] = register_triton_op(
            name=f"prof_opreg::{opname}", fake_fn=lambda x, y: torch.empty_like(x),
            triton_fn=launcher, differentiable=False,
        )(ref)  # fmt: skip
    return ops


def _cprofile(fn: Callable[[], Any], calls: int, path: Path) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    torch.cuda.synchronize()
    with path.open("w") as f:
        stats = pstats.Stats(profiler, stream=f)
        stats.sort_stats("tottime").print_stats(30)
        stats.sort_stats("cumulative").print_stats(30)
    out = path.read_text().splitlines()
    return "\n".join(out[:45])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument(
        "--before", help="another version of the module holding fast_launch: its rows too"
    )
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs CUDA")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    launchers = _launchers(args.before)
    ops = _ops(launchers)
    x = torch.randn(16, device="cuda")
    y = torch.randn(16, device="cuda")
    for name in ("plain", "fast", "staged", *(("fast-before",) if args.before else ())):
        torch.testing.assert_close(launchers[name](x, y), 2.0 * x + y)
        torch.testing.assert_close(ops[f"opreg {name}"](x, y), 2.0 * x + y)
        torch.testing.assert_close(ops[f"bare {name}"](x, y), 2.0 * x + y)

    cases: list[tuple[str, str, Callable[[], Any]]] = [
        ("torch.empty_like", "-", lambda: torch.empty_like(x))
    ]
    for name in ("noop", "plain", "fast", *(("fast-before",) if args.before else ())):
        launcher = launchers[name]
        cases += [
            (f"{name} launcher", "direct", lambda f=launcher: f(x, y)),
            (f"{name} launcher", "bare torch.library op", lambda f=ops[f"bare {name}"]: f(x, y)),
            (f"{name} launcher", "opreg op", lambda f=ops[f"opreg {name}"]: f(x, y)),
        ]
    fast_kernel = launchers["fast"].kernel  # type: ignore[attr-defined]
    before = fast_kernel.fast_calls
    samples = host_us_rounds([fn for _, _, fn in cases], args.calls, args.repeats)
    fast_launches = fast_kernel.fast_calls - before
    by = {(what, how): times for (what, how, _), times in zip(cases, samples, strict=True)}
    plain_direct = by[("plain launcher", "direct")]
    rows: list[dict[str, Any]] = []
    for (what, how, _), times in zip(cases, samples, strict=True):
        own = by.get((what, "direct"))
        rows.append(
            {
                "launcher": what, "called": how, "us": statistics.median(times),
                "over the launcher direct, us": (
                    statistics.median(a - b for a, b in zip(times, own, strict=True))
                    if own is not None and how != "direct" else None
                ),
                "vs plain launcher direct": median_ratio(times, plain_direct),
            }
        )  # fmt: skip

    # Stages of a fast launch, directly and inside each op, in interleaved rounds.
    staged = launchers["staged"]
    contexts = {
        "direct": lambda: staged(x, y),
        "bare torch.library op": lambda: ops["bare staged"](x, y),
        "opreg op": lambda: ops["opreg staged"](x, y),
    }
    totals: dict[str, dict[str, list[int]]] = {how: {} for how in contexts}
    branch_rows: dict[str, dict[str, int]] = {how: {} for how in contexts}
    for fn in contexts.values():
        for _ in range(200):
            fn()
    torch.cuda.synchronize()
    for _ in range(args.repeats):
        for how, fn in contexts.items():
            STAGES.clear()
            BRANCHES.clear()
            start = time.perf_counter_ns()
            for _ in range(args.calls // 4):
                fn()
            STAGES["whole call"] = [args.calls // 4, time.perf_counter_ns() - start]
            torch.cuda.synchronize()
            for name, (n, ns) in STAGES.items():
                entry = totals[how].setdefault(name, [0, 0])
                entry[0] += n
                entry[1] += ns
            for name, n in BRANCHES.items():
                branch_rows[how][name] = branch_rows[how].get(name, 0) + n
    stage_rows = {
        how: {name: ns / n for name, (n, ns) in stages.items()} for how, stages in totals.items()
    }

    texts = {
        "fast launcher": _cprofile(
            lambda: launchers["fast"](x, y), 20000, out_dir / "cprofile_fast_launcher.txt"
        ),
        "fast op": _cprofile(
            lambda: ops["opreg fast"](x, y), 20000, out_dir / "cprofile_fast_op.txt"
        ),
    }
    with (out_dir / "profile.json").open("w") as f:
        json.dump(
            {
                "calls": args.calls, "repeats": args.repeats, "layers": rows,
                "fast launches": fast_launches,
                "stages_ns": stage_rows, "branches": branch_rows,
                "torch": torch.__version__, "triton": triton.__version__,
                "gpu": torch.cuda.get_device_name(0), "python": sys.version.split()[0],
            },
            f, indent=1,
        )  # fmt: skip

    for name, text in texts.items():
        print(f"\n## cProfile, {name} (20000 calls; top of {out_dir}/cprofile_*.txt)\n")
        print(text)
    calls = args.repeats * (args.calls // 4)
    print(f"\n## stages of a fast launch, ns per call ({args.repeats} rounds, {calls} calls)\n")
    names = list(dict.fromkeys(n for stages in stage_rows.values() for n in stages))
    print("| stage | " + " | ".join(stage_rows) + " |")
    print("|---|" + "---|" * len(stage_rows))
    for n in names:
        cells = " | ".join(f"{stage_rows[h].get(n, float('nan')):.0f}" for h in stage_rows)
        print(f"| {n} | {cells} |")
    print("branches:", json.dumps(branch_rows))
    print(
        f"\n## layers, us per call (median of {args.repeats} interleaved rounds of {args.calls} "
        "calls; differences and ratios: medians within a round)\n"
    )
    print(
        "| launcher | called | us/call | over the same launcher direct | vs plain launcher direct |"
    )
    print("|---|---|---|---|---|")
    for r in rows:
        over = r["over the launcher direct, us"]
        over_text = "" if over is None else f"{over:+.2f} us"
        print(
            f"| {r['launcher']} | {r['called']} | {r['us']:.2f} | {over_text} | "
            f"{r['vs plain launcher direct']:.3f} |"
        )
    total = 3 * (args.repeats * args.calls + 50)
    print(f"\nfast launches in the fast-launcher rows: {fast_launches} of {total} calls")
    print(f"\ntorch {torch.__version__}, triton {triton.__version__}, "
          f"{torch.cuda.get_device_name(0)}, python {sys.version.split()[0]}")  # fmt: skip


if __name__ == "__main__":
    main()
