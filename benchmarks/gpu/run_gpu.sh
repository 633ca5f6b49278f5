#!/usr/bin/env bash
# opreg-kernels on a real GPU, in one command (torch and Triton preinstalled, no network):
#
#   bash benchmarks/gpu/run_gpu.sh [STEP...]      (default: tests interp bench)
#
# tests   tests/kernels with compiled Triton kernels on CUDA (Triton vs fallback element for
#         element, CUDA graphs, torch.compile, 64-bit indexing; device-guard tests on 2+ GPUs)
# interp  tests/kernels under TRITON_INTERPRET=1 (the CPU path CI runs), on this machine too
# bench   benchmarks/bench_kernels.py with the configuration sweep
# benchmain benchmarks/bench_kernels.py without the sweep (the main tables only)
# distributed tests/distributed (DTensor: 2 gloo processes on CPU; with 2+ GPUs also 2 NCCL
#         ranks, one GPU each, Triton kernels on each rank's shard under the device guard)
# core    tests/core on this machine's torch and Python (the version check of issue 5)
# testing tests/testing (the checks, plugin and `opreg check`, CUDA included). Its pytester
#         and CLI tests need the packages pip-installed (entry points): carry wheels built here
#         (`pip wheel --no-deps packages/*`) and `pip install --no-deps` them first; from
#         PYTHONPATH alone those tests fail.
# benchcore benchmarks/bench_core.py (per-call overhead on this host's CPU)
# direct  the direct call on CUDA: tests/core/test_direct_call.py and tests/kernels'
#         test_direct_call_triton.py, test_compiler_visible.py, test_fast_kernel.py, test_gpu.py
# export  tests/kernels/test_export.py on CUDA: torch.export save/load round trip in a fresh
#         process (vmap, Triton op opaque and compiler-visible, differentiable=False), eager and
#         torch.compile of the loaded program, and the error before the ops are imported
# userkernels benchmarks/bench_user_kernels.py (a user's Triton op against its launcher, and
#         against a hand-written autograd.Function: 1-tensor and 6-argument signatures)
# exact   benchmarks/exact_normal.py: philox_normal_exact's CUDA kernel vs its CPU fallback
#         bit for bit (2**26 * 3.6 values), and its GB/s vs torch.randn / philox_normal
#         ($OUT/exact_normal.json)
# autocast the autocast tests (tests/core/test_autocast.py, tests/kernels/test_autocast_triton.py:
#         bf16 and fp16 against ATen's CUDA lists, the Triton launcher, CUDA graphs), then
#         benchmarks/bench_autocast.py (what the rule costs and saves, graphs included)
# training benchmarks/bench_training.py on CUDA tensors, then on this host's CPU (an op
#         against a hand-written autograd.Function)
# swiglu  benchmarks/bench_swiglu.py (a Liger-style SwiGLU with an in-place Triton backward,
#         8192x4096 and 4x64 bf16: the opreg op against the hand-written Function, forward +
#         backward), after tests/kernels/test_swiglu_inplace.py on CUDA
#
# Logs and results go to $OUT (default benchmarks/results/gpu/out): environment.txt, one .log per step,
# bench.json, summary.txt. If pytest or hypothesis is missing, both are installed into a scratch
# directory from the wheels in $OPREG_GPU_WHEELS (default build/gpu-wheels, made by fetch_wheels.sh).
# Exit status: 0 if every step passed.
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
use_source_tree
record_environment
ensure_test_tools
pytest_args+=(--durations=10)
steps=("$@")
[ "${#steps[@]}" -gt 0 ] || steps=(tests interp bench)
for name in "${steps[@]}"; do
  case "$name" in
    tests) step tests_cuda 330 "$py" -m pytest tests/kernels "${pytest_args[@]}" -s ;;
    interp) step tests_interpreter 180 env TRITON_INTERPRET=1 "$py" -m pytest tests/kernels "${pytest_args[@]}" -q ;;
    bench) step bench 330 "$py" benchmarks/bench_kernels.py --sweep --json "$OUT/bench.json" ;;
    benchmain) step bench_main 240 "$py" benchmarks/bench_kernels.py --json "$OUT/bench.json" ;;
    distributed) step tests_distributed 400 "$py" -m pytest tests/distributed "${pytest_args[@]}" -q ;;
    core) step tests_core 420 "$py" -m pytest tests/core "${pytest_args[@]}" -q ;;
    testing) step tests_testing 300 "$py" -m pytest tests/testing "${pytest_args[@]}" -q ;;
    benchcore) step bench_core 200 "$py" benchmarks/bench_core.py ;;
    direct) step tests_direct 240 "$py" -m pytest tests/core/test_direct_call.py \
      tests/kernels/test_direct_call_triton.py tests/kernels/test_compiler_visible.py \
      tests/kernels/test_fast_kernel.py tests/kernels/test_gpu.py "${pytest_args[@]}" -q ;;
    export) step tests_export 300 "$py" -m pytest tests/kernels/test_export.py "${pytest_args[@]}" -q ;;
    userkernels) step bench_user_kernels 400 "$py" benchmarks/bench_user_kernels.py \
      --json "$OUT/user_kernels.json" ;;
    exact) step exact_normal 590 "$py" benchmarks/exact_normal.py --out "$OUT/exact_normal.json" ;;
    training) step bench_training 300 bash -c "'$py' benchmarks/bench_training.py --device cuda --rounds 21 --number 1000 \
      --json '$OUT/training_cuda.json' && '$py' benchmarks/bench_training.py --device cpu --rounds 21 --number 1000 \
      --json '$OUT/training_cpu.json'" ;;
    autocast) step tests_autocast 300 bash -c "'$py' -m pytest tests/core/test_autocast.py \
      tests/kernels/test_autocast_triton.py ${pytest_args[*]} -q && '$py' benchmarks/bench_autocast.py" ;;
    swiglu) step tests_swiglu 240 "$py" -m pytest tests/kernels/test_swiglu_inplace.py "${pytest_args[@]}" -q
      step bench_swiglu 240 "$py" benchmarks/bench_swiglu.py --device cuda --json "$OUT/swiglu.json" ;;
    *) echo "unknown step $name (tests, interp, bench, benchmain, distributed, core, testing, benchcore, direct, export, userkernels, exact, training, autocast, swiglu)"; status=1 ;;
  esac
done

finish
