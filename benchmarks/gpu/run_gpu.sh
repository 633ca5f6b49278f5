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
#
# Logs and results go to $OUT (default benchmarks/gpu/out): environment.txt, one .log per step,
# bench.json, summary.txt. If pytest or hypothesis is missing, both are installed into a scratch
# directory from the wheels in $OPREG_GPU_WHEELS (default build/gpu-wheels, made by fetch_wheels.sh).
# Exit status: 0 if every step passed.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root="$PWD"
OUT="${OUT:-$root/benchmarks/gpu/out}"
mkdir -p "$OUT"
py="${PYTHON:-python3}"
wheels="${OPREG_GPU_WHEELS:-$root/build/gpu-wheels}"
export PYTHONPATH="$root/packages/opreg-core/src:$root/packages/opreg-kernels/src:$root/packages/opreg-testing/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
unset TRITON_INTERPRET OPREG_DISABLE_TRITON

{
  date -u
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv || true
  "$py" - <<'PY'
import platform, sys
import torch
print("python", sys.version.split()[0], platform.machine(), platform.processor())
print("torch", torch.__version__, "cuda", torch.version.cuda)
try:
    import triton
    print("triton", triton.__version__)
except Exception as exc:
    print("triton import failed:", exc)
print("gpus", [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
PY
} > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"

if ! "$py" -c "import pytest, hypothesis" 2>/dev/null; then
  site="${TMPDIR:-/tmp}/opreg-gpu-site"
  echo "pytest or hypothesis missing: installing them from $wheels into $site"
  "$py" -m pip install --quiet --disable-pip-version-check --no-index --find-links "$wheels" \
    --target "$site" pytest hypothesis && export PYTHONPATH="$PYTHONPATH:$site"
fi

status=0
: > "$OUT/summary.txt"
step() {  # step NAME TIMEOUT_S COMMAND...
  local name=$1 limit=$2
  shift 2
  echo "=== $name: $*"
  local start=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc ($((SECONDS - start)) s)" | tee -a "$OUT/summary.txt"
  tail -n 25 "$OUT/$name.log"
  [ "$rc" -eq 0 ] || status=1
}

pytest_args=(-p no:cacheprovider -ra --durations=10)
# The tests use the opreg-testing plugin; without the installed package's entry point, load it.
if ! "$py" -c "import importlib.metadata as m, sys; sys.exit(not any(e.value.startswith('opreg_testing') for e in m.entry_points(group='pytest11')))"; then
  pytest_args+=(-p opreg_testing.plugin)
fi
steps=("$@")
[ "${#steps[@]}" -gt 0 ] || steps=(tests interp bench)
for name in "${steps[@]}"; do
  case "$name" in
    tests) step tests_cuda 330 "$py" -m pytest tests/kernels "${pytest_args[@]}" -s ;;
    interp) step tests_interpreter 180 env TRITON_INTERPRET=1 "$py" -m pytest tests/kernels "${pytest_args[@]}" -q ;;
    bench) step bench 330 "$py" benchmarks/bench_kernels.py --sweep --json "$OUT/bench.json" ;;
    benchmain) step bench_main 240 "$py" benchmarks/bench_kernels.py --json "$OUT/bench.json" ;;
    distributed) step tests_distributed 400 "$py" -m pytest tests/distributed "${pytest_args[@]}" -q ;;
    core) step tests_core 240 "$py" -m pytest tests/core "${pytest_args[@]}" -q ;;
    testing) step tests_testing 300 "$py" -m pytest tests/testing "${pytest_args[@]}" -q ;;
    benchcore) step bench_core 200 "$py" benchmarks/bench_core.py ;;
    *) echo "unknown step $name (tests, interp, bench, benchmain, distributed, core, testing, benchcore)"; status=1 ;;
  esac
done

echo "=== summary"
cat "$OUT/summary.txt"
exit "$status"
