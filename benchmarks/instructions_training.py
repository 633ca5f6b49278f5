"""Instructions per call of ``bench_training``'s contenders, counted by valgrind's callgrind:
a figure that a shared or noisy machine does not change, for the host cost of a training step.

    python benchmarks/instructions_training.py [--calls 1000] [--suite training|user]
                                               [--json PATH]

For each signature (1 tensor, 6 arguments; with the training suite, list of 3 too), path
(no grad, forward, forward + backward) and contender (the hand-written
``torch.autograd.Function``, the opreg op), a child process runs the call under
``valgrind --tool=callgrind --instr-atstart=no``: 200 warm calls, then
``callgrind_control -i on``, the timed calls, ``-i off``. Each case runs twice, with ``calls``
and ``2 * calls`` calls; the difference over ``calls`` is the count per call (the toggling's
own cost cancels). Needs ``valgrind`` on the PATH; CPU tensors only (valgrind does not run
CUDA). ``--suite user`` counts ``bench_user_kernels``'s contenders instead: the same
computations registered with ``register_triton_op`` (a Triton kernel for CUDA, so a CPU call
takes the path of an op with device kernels and runs its PyTorch fallback). Instructions are
not time (a cache miss costs more than an add), so the timed benchmark stays the reference;
this one tells a 3 % change from noise on a 2-core VM.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONTENDERS = ("Function", "opreg")
PATHS = {"no grad": "nograd", "forward": "fwd", "forward + backward": "fb"}
SIGNATURES = ("1 tensor", "6 arguments")
#: bench_training's signatures beyond those of both suites
TRAINING_ONLY = ("list of 3",)


def _child(suite: str, contender: str, signature: str, path: str, calls: int) -> None:
    """Runs inside valgrind: warm up, then ``calls`` calls with instrumentation on."""
    import torch

    sys.path.insert(0, str(HERE))
    import bench_training

    torch.set_num_threads(1)
    if suite == "user":
        import bench_user_kernels

        ops = bench_user_kernels.build_vs_function("cpu")
    else:
        ops = bench_training.build("opreg_bench_instructions")
    fn = ops[signature][contender]
    args = bench_training._inputs(signature, "cpu", path != "nograd")
    grad = torch.ones_like(fn(*args))

    def step() -> None:
        if path == "fb":
            fn(*args).backward(grad)
        else:
            fn(*args)

    for _ in range(200):
        step()
    pid = str(os.getpid())
    subprocess.run(["callgrind_control", "-i", "on", pid], capture_output=True, check=True)
    for _ in range(calls):
        step()
    subprocess.run(["callgrind_control", "-i", "off", pid], capture_output=True, check=True)


def _count(suite: str, contender: str, signature: str, path: str, calls: int) -> int:
    """Instructions callgrind collected over ``calls`` calls (plus the toggling's cost)."""
    command = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null",
        sys.executable, __file__, "--child", suite, contender, signature, path, str(calls),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    for line in done.stderr.splitlines():
        if "Collected :" in line:
            return int(line.split(":")[-1].strip())
    raise RuntimeError(f"no instruction count in valgrind's output:\n{done.stderr[-2000:]}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]))
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument(
        "--suite", choices=("training", "user"), default="training",
        help="bench_training's ops (default) or bench_user_kernels' register_triton_op ops",
    )  # fmt: skip
    parser.add_argument("--json", metavar="PATH", help="also write the results to PATH")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("instructions_training.py needs valgrind (callgrind and callgrind_control)")
    import torch

    print(
        f"torch {torch.__version__} | Python {platform.python_version()} | "
        f"suite {args.suite} | instructions/call"
    )
    print(f"| {'signature':<11} | {'path':<18} | {'Function':>9} | {'opreg':>9} | opreg/Function |")
    print(f"|{'-' * 13}|{'-' * 20}|{'-' * 11}|{'-' * 11}|----------------|")
    rows = []
    signatures = SIGNATURES + (TRAINING_ONLY if args.suite == "training" else ())
    for signature in signatures:
        for label, path in PATHS.items():
            per_call = {}
            for contender in CONTENDERS:
                once = _count(args.suite, contender, signature, path, args.calls)
                twice = _count(args.suite, contender, signature, path, 2 * args.calls)
                per_call[contender] = (twice - once) / args.calls
            ratio = per_call["opreg"] / per_call["Function"]
            rows.append({"signature": signature, "path": label, **per_call, "ratio": ratio})
            print(
                f"| {signature:<11} | {label:<18} | {per_call['Function']:>9.0f} "
                f"| {per_call['opreg']:>9.0f} | {ratio:>14.3f} |"
            )
    if args.json:
        meta = {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "calls": args.calls,
            "suite": args.suite,
        }
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
